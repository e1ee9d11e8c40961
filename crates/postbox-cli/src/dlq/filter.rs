//! The flags that select dead letters (`--topic`, `--key`, ages, `--error`,
//! `--id`, and `--consumer` on the consumer side) and guard acting on them
//! (`--yes`, `--all`): parsed here, turned into the one filter every face
//! shares (`postbox_console::ops::dead_letters::Filter`), which checks them.

use humantime_serde::re::humantime;
use postbox_console::ops::dead_letters::Filter;
use std::time::Duration;

/// Which dead letters; filters combine with AND.
#[derive(clap::Args, Default)]
pub(crate) struct FilterArgs {
    /// Only this topic (exact; the queue or topic a consumer read, for consumer dead letters).
    #[arg(long)]
    topic: Option<String>,
    /// Only this key (exact).
    #[arg(long)]
    key: Option<String>,
    /// Only those dead-lettered more than this long ago (e.g. 30m, 1h, 2d).
    #[arg(long, value_name = "AGE", value_parser = age)]
    older_than: Option<Duration>,
    /// Only those dead-lettered less than this long ago (e.g. 10m).
    #[arg(long, value_name = "AGE", value_parser = age)]
    newer_than: Option<Duration>,
    /// Only those whose last_error contains this text (case-insensitive).
    #[arg(long, value_name = "TEXT", value_parser = text)]
    error: Option<String>,
    /// Only these dead-letter ids (repeat for several).
    #[arg(long = "id", value_name = "ID")]
    ids: Vec<i64>,
}

/// The consumer side's own filter.
#[derive(clap::Args, Default)]
pub(crate) struct ConsumerArg {
    /// Only this consumer's (exact).
    #[arg(long, value_parser = text)]
    consumer: Option<String>,
}

impl FilterArgs {
    /// The shared filter, with the consumer side's `--consumer`.
    pub(crate) fn filter(self, consumer: Option<ConsumerArg>) -> Filter {
        Filter {
            consumer: consumer.and_then(|c| c.consumer),
            topic: self.topic,
            key: self.key,
            older_than_seconds: self.older_than.map(|d| d.as_secs_f64()),
            newer_than_seconds: self.newer_than.map(|d| d.as_secs_f64()),
            error: self.error,
            fingerprint: None,
            ids: self.ids,
        }
    }
}

#[derive(clap::Args)]
pub(crate) struct ActArgs {
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

/// Text to look for: an empty one would select everything.
fn text(s: &str) -> Result<String, String> {
    if s.is_empty() {
        return Err("give some text to look for".into());
    }
    Ok(s.to_owned())
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
        assert!(text("").is_err());
    }

    #[test]
    fn swapped_ages_are_refused_by_the_shared_filter() {
        let f = FilterArgs {
            older_than: Some(Duration::from_secs(3600)),
            newer_than: Some(Duration::from_secs(600)),
            ..FilterArgs::default()
        }
        .filter(None);
        let e = f
            .check(postbox_console::ops::dead_letters::Side::Relay)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("older than 1h and newer than 10m") && e.contains("swap"),
            "{e}"
        );
    }
}
