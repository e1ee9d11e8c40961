//! Which dead letters a command selects (`--topic`, `--key`, ages,
//! `--error`, `--id`), and the guard on acting on them (`--yes`, `--all`).

use crate::CliError;
use humantime_serde::re::humantime;
use std::time::Duration;

/// Which dead letters; filters combine with AND.
#[derive(clap::Args, Default)]
pub(super) struct Filter {
    /// Only this topic (exact).
    #[arg(long)]
    pub(super) topic: Option<String>,
    /// Only this key (exact).
    #[arg(long)]
    pub(super) key: Option<String>,
    /// Only those dead-lettered more than this long ago (e.g. 30m, 1h, 2d).
    #[arg(long, value_name = "AGE", value_parser = age)]
    pub(super) older_than: Option<Duration>,
    /// Only those dead-lettered less than this long ago (e.g. 10m).
    #[arg(long, value_name = "AGE", value_parser = age)]
    pub(super) newer_than: Option<Duration>,
    /// Only those whose last_error contains this text (case-insensitive).
    #[arg(long, value_name = "TEXT")]
    pub(super) error: Option<String>,
    /// Only these dead-letter ids (repeat for several).
    #[arg(long = "id", value_name = "ID")]
    pub(super) ids: Vec<i64>,
}

#[derive(clap::Args)]
pub(crate) struct Act {
    /// Act; without it the command is a dry run that prints what it would do.
    #[arg(long)]
    pub(crate) yes: bool,
    /// Select every dead letter of the schema (required when no filter is given).
    #[arg(long, conflicts_with_all = ["topic", "key", "older_than", "newer_than", "error", "ids"])]
    pub(crate) all: bool,
}

pub(crate) fn age(s: &str) -> Result<Duration, String> {
    let d = humantime::parse_duration(s.trim()).map_err(|_| {
        format!("{s:?} is not a duration: give a number and a unit, e.g. 90s, 10m, 1h, 2d")
    })?;
    if d.is_zero() {
        return Err("the duration must be more than 0 (e.g. 10m)".into());
    }
    Ok(d)
}

impl Filter {
    pub(super) fn is_empty(&self) -> bool {
        self.topic.is_none()
            && self.key.is_none()
            && self.older_than.is_none()
            && self.newer_than.is_none()
            && self.error.is_none()
            && self.ids.is_empty()
    }

    pub(super) fn check(&self) -> Result<(), CliError> {
        if let (Some(old), Some(new)) = (self.older_than, self.newer_than) {
            if old >= new {
                return Err(format!(
                    "--older-than {} --newer-than {} selects nothing: a dead letter would have to be older than {0} and newer than {1}. Did you swap them?",
                    humantime::format_duration(old),
                    humantime::format_duration(new)
                )
                .into());
            }
        }
        if self.error.as_deref() == Some("") {
            return Err("--error needs some text to look for in last_error".into());
        }
        Ok(())
    }

    /// Bind the seven filter parameters ($1..$7) in the order the queries
    /// expect; the error fingerprint ($7) is the console's filter.
    pub(super) fn bind<'q, O>(
        &'q self,
        q: sqlx::query::QueryAs<'q, sqlx::Postgres, O, sqlx::postgres::PgArguments>,
    ) -> sqlx::query::QueryAs<'q, sqlx::Postgres, O, sqlx::postgres::PgArguments> {
        q.bind(self.topic.as_deref())
            .bind(self.key.as_deref())
            .bind(self.older_than.map(|d| d.as_secs_f64()))
            .bind(self.newer_than.map(|d| d.as_secs_f64()))
            .bind(self.error.as_deref())
            .bind((!self.ids.is_empty()).then_some(self.ids.as_slice()))
            .bind(None::<&str>)
    }
}

/// Refuse an unfiltered replay/purge unless `--all`; filters are checked too.
pub(super) fn selection(
    what: &str,
    schema: &str,
    filter: &Filter,
    act: &Act,
) -> Result<(), CliError> {
    filter.check()?;
    if filter.is_empty() && !act.all {
        return Err(format!(
            "no filter given: refusing to {what} every dead letter of schema {schema}. Narrow the selection with --topic, --key, --older-than, --newer-than, --error or --id, or pass --all"
        )
        .into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ages_parse_or_say_what_is_expected() {
        assert_eq!(age("1h").unwrap(), Duration::from_secs(3600));
        assert_eq!(age("10m").unwrap(), Duration::from_secs(600));
        assert_eq!(age("2d").unwrap(), Duration::from_secs(172_800));
        let e = age("yesterday").unwrap_err();
        assert!(e.contains("\"yesterday\"") && e.contains("1h"), "{e}");
        assert!(age("0s").is_err());
    }

    #[test]
    fn swapped_ages_are_refused() {
        let f = Filter {
            older_than: Some(Duration::from_secs(3600)),
            newer_than: Some(Duration::from_secs(600)),
            ..Filter::default()
        };
        assert!(f.check().unwrap_err().to_string().contains("swap"));
    }
}
