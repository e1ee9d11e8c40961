//! The relay's settings: one typed struct, each field with its default,
//! validated once at start-up. The CLI layers file < environment < flags on it.

use crate::Secret;
use postbox::SchemaName;
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// Relay settings (`[relay]` in the config file).
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// PostgreSQL URL (`postgres://user:pass@host/db?sslmode=verify-full`).
    /// Required; `DATABASE_URL` is read when nothing else sets it.
    pub database_url: Secret,
    /// Schemas whose outbox this relay serves.
    pub schemas: Vec<String>,
    /// Worker sessions per schema; each owns a share of the 64 partitions.
    pub workers: usize,
    /// Rows claimed per batch.
    pub batch_size: i64,
    /// Fallback poll period when no wake-up arrives.
    #[serde(with = "humantime_serde")]
    #[schemars(with = "crate::HumanDuration")]
    pub poll_interval: Duration,
    /// After a pass that found events, poll again at this period instead of
    /// waiting for a wake-up, for `busy_poll_for`.
    #[serde(with = "humantime_serde")]
    #[schemars(with = "crate::HumanDuration")]
    pub busy_poll_interval: Duration,
    /// How long to keep polling at `busy_poll_interval` after the last event
    /// before sleeping until a wake-up (with `--notify adaptive`, producers
    /// skip the NOTIFY meanwhile). `0s`: sleep at once.
    #[serde(with = "humantime_serde")]
    #[schemars(with = "crate::HumanDuration")]
    pub busy_poll_for: Duration,
    /// When no worker of a schema has claimed more than
    /// `batch_size × keeping_up_workers / workers` events at a pass for this
    /// long, the first `keeping_up_workers` take all of the relay's
    /// partitions of that schema and the others stand by: fewer passes
    /// cover them all, which spares PostgreSQL most of a keeping-up relay's
    /// transactions. A full batch spreads them over every worker again.
    /// `0s`: every worker keeps its share.
    #[serde(with = "humantime_serde")]
    #[schemars(with = "crate::HumanDuration")]
    pub consolidate_after: Duration,
    /// Workers per schema that claim while the relay keeps up (see
    /// `consolidate_after`). One costs PostgreSQL least but does every
    /// claim, publish and commit in turn, which lengthens the latency tail
    /// under load; from `workers` up, all keep claiming.
    pub keeping_up_workers: usize,
    /// How often workers count relay members and rebalance partitions
    /// unasked. Joins, releases and clean stops are announced and rebalanced
    /// at once; the tick is for relays that died without a word.
    #[serde(with = "humantime_serde")]
    #[schemars(with = "crate::HumanDuration")]
    pub rebalance_interval: Duration,
    /// Longest wait for the broker to acknowledge one batch. What it
    /// acknowledged by then is marked sent; the send it cuts off is a
    /// transient failure, and the rest of the batch stays in the outbox for
    /// the next one.
    #[serde(with = "humantime_serde")]
    #[schemars(with = "crate::HumanDuration")]
    pub publish_timeout: Duration,
    /// How long a relay worker's database session may stay silent (relay host
    /// gone, network cut without a clean close) before PostgreSQL ends it and
    /// frees its partitions for the other relays (`idle_session_timeout` and
    /// `idle_in_transaction_session_timeout` on the worker's session); the
    /// worker itself gives a session up that does not answer within it. Must
    /// exceed `publish_timeout`, `rebalance_interval` and `backoff_max`, so a
    /// healthy worker is never cut and a cut-off one has finished publishing
    /// what it claimed before another relay can claim it again.
    #[serde(with = "humantime_serde")]
    #[schemars(with = "crate::HumanDuration")]
    pub session_timeout: Duration,
    /// How long a sink may be unable to publish (its broker's check fails)
    /// before this relay gives its partitions to relays that can, and takes
    /// none until its broker answers again. Only when another relay has
    /// published or reached its broker since the outage began: when no relay
    /// can publish, nobody moves. `0s`: ownership ignores health.
    #[serde(with = "humantime_serde")]
    #[schemars(with = "crate::HumanDuration")]
    pub unavailable_after: Duration,
    /// How often the relay records its health in each schema's
    /// `outbox_relays` (what `postbox status`, the console and the other
    /// relays read) and reads the other relays' records. A record not
    /// renewed within three of these is stale.
    #[serde(with = "humantime_serde")]
    #[schemars(with = "crate::HumanDuration")]
    pub health_interval: Duration,
    /// First backoff after a transient failure (broker or database down).
    #[serde(with = "humantime_serde")]
    #[schemars(with = "crate::HumanDuration")]
    pub backoff_min: Duration,
    /// Longest backoff after transient failures.
    #[serde(with = "humantime_serde")]
    #[schemars(with = "crate::HumanDuration")]
    pub backoff_max: Duration,
    /// Poison failures (the broker refused the event) before a row moves to
    /// the dead-letter table.
    pub max_attempts: i32,
    /// Topic patterns (`*` wildcard) whose rows are not dead-lettered after
    /// `max_attempts`: they stay in the outbox and block their key until an
    /// operator acts. Other topics' rows go to the dead-letter table and
    /// their key moves on.
    pub block_topics: Vec<String>,
    /// First retry delay after a poison failure. Formerly `retry_base`.
    #[serde(with = "humantime_serde")]
    #[schemars(with = "crate::HumanDuration")]
    pub retry_min: Duration,
    /// Longest retry delay after poison failures.
    #[serde(with = "humantime_serde")]
    #[schemars(with = "crate::HumanDuration")]
    pub retry_max: Duration,
    /// Delivered rows: `mark` (set `sent_at`; retention deletes them after
    /// `outbox_retention`, so recent history stays queryable) or `delete` (at
    /// once: about a fifth of the database work per event).
    pub sent: SentRows,
    /// Sent outbox rows older than this are deleted.
    #[serde(with = "humantime_serde")]
    #[schemars(with = "crate::HumanDuration")]
    pub outbox_retention: Duration,
    /// Inbox rows older than this are deleted; keep it longer than any broker
    /// redelivery window.
    #[serde(with = "humantime_serde")]
    #[schemars(with = "crate::HumanDuration")]
    pub inbox_retention: Duration,
    /// Dead letters older than this are deleted (the relay's and the consumers'; not
    /// those an operator asked to replay).
    #[serde(with = "humantime_serde")]
    #[schemars(with = "crate::HumanDuration")]
    pub dead_letter_retention: Duration,
    /// How often retention runs (one relay instance at a time).
    #[serde(with = "humantime_serde")]
    #[schemars(with = "crate::HumanDuration")]
    pub maintenance_interval: Duration,
    /// Rows deleted per retention statement.
    pub retention_batch: i64,
    /// How often the pending/lag gauges are refreshed, and the events
    /// delivered since are added to the schema's per-minute counts (the
    /// console's chart).
    #[serde(with = "humantime_serde")]
    #[schemars(with = "crate::HumanDuration")]
    pub stats_interval: Duration,
    /// The CloudEvents `source` of every event of sinks with
    /// `format = "cloudevents"`: a URI reference in which `{database}` and
    /// `{schema}` stand for the outbox's database and schema.
    pub cloudevents_source: String,
    /// Per-schema CloudEvents sources, over `cloudevents_source`
    /// (`[relay.cloudevents_sources] sales = "https://shop.example/sales"`).
    pub cloudevents_sources: std::collections::BTreeMap<String, String>,
}

impl crate::Section for Config {
    const NAME: &'static str = "relay";
    const ALIASES: &'static [crate::Alias] = &[
        crate::Alias {
            field: "database_url",
            flags: &[],
            env: &["DATABASE_URL"],
        },
        crate::Alias {
            field: "schemas",
            flags: &["schema"],
            env: &[],
        },
    ];
    const RENAMED: &'static [crate::Renamed] = &[crate::Renamed {
        old: "retry_base",
        new: "retry_min",
    }];
}

impl Default for Config {
    fn default() -> Self {
        Config {
            database_url: Secret::default(),
            schemas: vec![postbox::DEFAULT_SCHEMA.to_owned()],
            workers: 4,
            batch_size: 500,
            poll_interval: Duration::from_secs(1),
            rebalance_interval: Duration::from_secs(1),
            busy_poll_interval: Duration::from_millis(1),
            busy_poll_for: Duration::from_millis(10),
            consolidate_after: Duration::from_secs(1),
            keeping_up_workers: 1,
            publish_timeout: Duration::from_secs(10),
            session_timeout: Duration::from_secs(30),
            unavailable_after: Duration::from_secs(3),
            health_interval: Duration::from_secs(1),
            backoff_min: Duration::from_millis(100),
            backoff_max: Duration::from_secs(5),
            max_attempts: 10,
            block_topics: Vec::new(),
            retry_min: Duration::from_secs(1),
            retry_max: Duration::from_secs(300),
            sent: SentRows::Mark,
            outbox_retention: Duration::from_secs(3600),
            inbox_retention: Duration::from_secs(7 * 24 * 3600),
            dead_letter_retention: Duration::from_secs(30 * 24 * 3600),
            maintenance_interval: Duration::from_secs(30),
            retention_batch: 1000,
            stats_interval: Duration::from_secs(5),
            cloudevents_source: "//postbox/{database}/{schema}".into(),
            cloudevents_sources: Default::default(),
        }
    }
}

/// What the relay does with a delivered outbox row.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum SentRows {
    /// Set `sent_at`; retention deletes the row later.
    #[default]
    Mark,
    /// Delete the row at once.
    Delete,
}

impl SentRows {
    /// What the claim does to the rows it takes (delivered or not, it is
    /// undone for those the broker did not take).
    pub(crate) fn take(self) -> postbox::sql::Take {
        match self {
            SentRows::Mark => postbox::sql::Take::Mark,
            SentRows::Delete => postbox::sql::Take::Delete,
        }
    }
}

impl std::str::FromStr for SentRows {
    type Err = postbox::UnknownChoice;
    fn from_str(s: &str) -> Result<Self, postbox::UnknownChoice> {
        match s {
            "mark" => Ok(SentRows::Mark),
            "delete" => Ok(SentRows::Delete),
            other => Err(postbox::UnknownChoice {
                what: "sent-row policy",
                value: other.to_owned(),
                choices: "mark or delete",
            }),
        }
    }
}

/// A setting that cannot work.
#[derive(Debug, thiserror::Error)]
#[error("invalid relay setting `{field}`: {reason}")]
pub struct ConfigError {
    /// The setting's name as in the config file.
    pub field: &'static str,
    /// Why, and what to do.
    pub reason: String,
}

impl Config {
    /// The server(s) `database_url` names: one, or a primary and its standbys
    /// (`postgres://a:5432,b:5432/db?target_session_attrs=read-write`).
    pub fn servers(&self) -> Result<postbox::Servers, postbox::ServersError> {
        self.database_url.expose().parse()
    }

    /// `cloudevents_source` and `cloudevents_sources`, checked, with
    /// `{database}` filled in (the database `database_url` names, else its
    /// user's, as libpq defaults).
    pub fn cloudevents_sources(&self) -> Result<crate::cloudevents::Sources, ConfigError> {
        let options = self.servers().map(|s| s.options()).ok();
        let database = options
            .as_ref()
            .and_then(|o| o.get_database().or(Some(o.get_username())))
            .unwrap_or_default()
            .to_owned();
        let err = |field, reason| ConfigError { field, reason };
        let default = crate::cloudevents::source(&self.cloudevents_source, &database)
            .map_err(|reason| err("cloudevents_source", reason))?;
        let mut per_schema = std::collections::BTreeMap::new();
        for (schema, template) in &self.cloudevents_sources {
            if !self.schemas.contains(schema) {
                return Err(err(
                    "cloudevents_sources",
                    format!(
                        "names schema {schema:?}, which this relay does not serve (schemas: {})",
                        self.schemas.join(", ")
                    ),
                ));
            }
            let source = crate::cloudevents::source(template, &database)
                .map_err(|reason| err("cloudevents_sources", format!("{schema}: {reason}")))?;
            per_schema.insert(schema.clone(), source);
        }
        Ok(crate::cloudevents::Sources {
            default,
            per_schema,
        })
    }

    /// Check every field; returns the validated schema names.
    pub fn validate(&self) -> Result<Vec<SchemaName>, ConfigError> {
        self.validate_database_url()?;
        self.cloudevents_sources()?;
        let schemas = self.validate_schemas()?;
        self.validate_sizes()?;
        self.validate_durations()?;
        Ok(schemas)
    }

    fn validate_database_url(&self) -> Result<(), ConfigError> {
        let err = |reason: String| {
            Err(ConfigError {
                field: "database_url",
                reason,
            })
        };
        if self.database_url.expose().is_empty() {
            return err(
                "missing: pass --database-url or set POSTBOX_DATABASE_URL / DATABASE_URL".into(),
            );
        }
        if !self.database_url.expose().starts_with("postgres://")
            && !self.database_url.expose().starts_with("postgresql://")
        {
            return err(format!(
                "{} is not a postgres:// or postgresql:// URL",
                self.database_url
            ));
        }
        if let Err(e) = self.servers() {
            return err(e.to_string());
        }
        Ok(())
    }

    fn validate_schemas(&self) -> Result<Vec<SchemaName>, ConfigError> {
        let err = |reason: String| {
            Err(ConfigError {
                field: "schemas",
                reason,
            })
        };
        if self.schemas.is_empty() {
            return err("empty: name at least one schema".into());
        }
        let mut schemas = Vec::new();
        for s in &self.schemas {
            match SchemaName::new(s) {
                Ok(s) if schemas.contains(&s) => return err(format!("{s:?} is listed twice")),
                Ok(s) => schemas.push(s),
                Err(e) => return err(e.to_string()),
            }
        }
        Ok(schemas)
    }

    /// Counts and sizes.
    fn validate_sizes(&self) -> Result<(), ConfigError> {
        let err = |field, reason: String| Err(ConfigError { field, reason });
        if !(1..=64).contains(&self.workers) {
            return err("workers", format!("{} is outside 1..=64", self.workers));
        }
        if self.keeping_up_workers < 1 {
            return err(
                "keeping_up_workers",
                "must be at least 1 (`consolidate_after = \"0s\"` keeps every worker claiming)"
                    .into(),
            );
        }
        if !(1..=100_000).contains(&self.batch_size) {
            return err(
                "batch_size",
                format!("{} is outside 1..=100000", self.batch_size),
            );
        }
        if self.max_attempts < 1 {
            return err(
                "max_attempts",
                format!("{} must be at least 1", self.max_attempts),
            );
        }
        if !(1..=100_000).contains(&self.retention_batch) {
            return err(
                "retention_batch",
                format!("{} is outside 1..=100000", self.retention_batch),
            );
        }
        Ok(())
    }

    /// Durations: none zero, the ranges in order, the session timeout
    /// longer than a healthy worker's silences.
    fn validate_durations(&self) -> Result<(), ConfigError> {
        let err = |field, reason: String| Err(ConfigError { field, reason });
        for (field, d) in [
            ("poll_interval", self.poll_interval),
            ("rebalance_interval", self.rebalance_interval),
            ("busy_poll_interval", self.busy_poll_interval),
            ("publish_timeout", self.publish_timeout),
            ("backoff_min", self.backoff_min),
            ("backoff_max", self.backoff_max),
            ("retry_min", self.retry_min),
            ("retry_max", self.retry_max),
            ("outbox_retention", self.outbox_retention),
            ("inbox_retention", self.inbox_retention),
            ("dead_letter_retention", self.dead_letter_retention),
            ("maintenance_interval", self.maintenance_interval),
            ("stats_interval", self.stats_interval),
            ("health_interval", self.health_interval),
        ] {
            if d.is_zero() {
                return err(field, "must be greater than zero".into());
            }
        }
        if self.backoff_min > self.backoff_max {
            return err("backoff_min", "is greater than backoff_max".into());
        }
        for (field, d) in [
            ("publish_timeout", self.publish_timeout),
            ("rebalance_interval", self.rebalance_interval),
            ("backoff_max", self.backoff_max),
        ] {
            if self.session_timeout <= d {
                return err(
                    "session_timeout",
                    format!(
                        "{} must exceed {field} ({}): a healthy worker is silent that long",
                        humantime_serde::re::humantime::format_duration(self.session_timeout),
                        humantime_serde::re::humantime::format_duration(d)
                    ),
                );
            }
        }
        if self.retry_min > self.retry_max {
            return err("retry_min", "is greater than retry_max".into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validation_names_the_field() {
        let mut c = Config {
            database_url: Secret::new("postgres://h/db"),
            ..Config::default()
        };
        assert!(c.validate().is_ok());
        c.schemas = vec!["Bad".into()];
        let e = c.validate().unwrap_err().to_string();
        assert!(
            e.contains("`schemas`") && e.contains("invalid schema name"),
            "{e}"
        );
        c.schemas = vec!["ok".into()];
        c.batch_size = 0;
        assert!(c.validate().unwrap_err().to_string().contains("batch_size"));
        c.batch_size = 10;
        c.database_url = Secret::new("mysql://x");
        assert!(c
            .validate()
            .unwrap_err()
            .to_string()
            .contains("database_url"));
    }

    #[test]
    fn a_healthy_worker_outlasts_the_session_timeout() {
        let mut c = Config {
            database_url: Secret::new("postgres://h/db"),
            session_timeout: Duration::from_secs(10),
            ..Config::default()
        };
        let e = c.validate().unwrap_err().to_string();
        assert!(
            e.contains("session_timeout") && e.contains("publish_timeout (10s)"),
            "{e}"
        );
        c.publish_timeout = Duration::from_secs(2);
        assert!(c.validate().is_ok());
        c.backoff_max = Duration::from_secs(20);
        let e = c.validate().unwrap_err().to_string();
        assert!(e.contains("backoff_max (20s)"), "{e}");
    }
}
