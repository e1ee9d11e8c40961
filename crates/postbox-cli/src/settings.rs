//! The relay's settings file, layered: defaults < file < environment < flags.

use crate::CliError;
use humantime_serde::re::humantime;
use postbox_bullmq::{BullmqConfig, PayloadPolicy, PublishMode};
use postbox_kafka::KafkaConfig;
use postbox_relay::{Config, Secret};
use serde::Deserialize;
use std::path::PathBuf;
use std::time::Duration;

/// The whole config file.
#[derive(Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Settings {
    /// `[relay]`: see [`postbox_relay::Config`].
    pub relay: Config,
    /// `[bullmq]`: see [`postbox_bullmq::BullmqConfig`].
    pub bullmq: BullmqConfig,
    /// `[kafka]`: see [`postbox_kafka::KafkaConfig`].
    pub kafka: KafkaConfig,
    /// Sink for events no route matches: `bullmq` or `kafka`. Default: `bullmq`.
    pub sink: SinkKind,
    /// `[[routes]]`: `topic` pattern (`*` wildcard) → `sink`, first match wins.
    pub routes: Vec<Route>,
    /// Address of the admin HTTP server (`/metrics`, `/healthz`, `/readyz`),
    /// e.g. `127.0.0.1:9187`. Default: none (not served).
    pub admin_listen: Option<String>,
}

/// A broker the relay can publish to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum SinkKind {
    /// BullMQ on Redis.
    #[default]
    Bullmq,
    /// Kafka.
    Kafka,
}

/// One routing rule: events matching `topic` and/or `schema` go to `sink`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Route {
    /// Topic pattern, `*` matches any run of characters. Default: any topic.
    pub topic: Option<String>,
    /// Outbox schema. Default: any schema.
    pub schema: Option<String>,
    /// Where matching events go.
    pub sink: SinkKind,
}

fn duration(s: &str) -> Result<Duration, String> {
    humantime::parse_duration(s).map_err(|e| format!("{e} (examples: 500ms, 2s, 5m)"))
}

/// Flags of `postbox relay`; each also reads the environment variable shown.
#[derive(clap::Args, Debug)]
pub struct Overrides {
    /// TOML config file with [relay] and [bullmq] sections (see README).
    #[arg(long, short, env = "POSTBOX_CONFIG")]
    pub config: Option<PathBuf>,
    /// PostgreSQL URL (required). Falls back to DATABASE_URL.
    #[arg(long, env = "POSTBOX_DATABASE_URL", hide_env_values = true)]
    pub database_url: Option<String>,
    /// Schemas to relay, comma-separated [default: postbox].
    #[arg(long, env = "POSTBOX_SCHEMAS", value_delimiter = ',')]
    pub schemas: Option<Vec<String>>,
    /// Worker sessions per schema, each owning a share of the 64 partitions [default: 4].
    #[arg(long, env = "POSTBOX_WORKERS")]
    pub workers: Option<usize>,
    /// Rows claimed per batch [default: 500].
    #[arg(long, env = "POSTBOX_BATCH_SIZE")]
    pub batch_size: Option<i64>,
    /// Fallback poll period when no NOTIFY arrives [default: 1s].
    #[arg(long, env = "POSTBOX_POLL_INTERVAL", value_parser = duration)]
    pub poll_interval: Option<Duration>,
    /// After events flowed, poll at this period instead of waiting for a NOTIFY [default: 1ms].
    #[arg(long, env = "POSTBOX_BUSY_POLL_INTERVAL", value_parser = duration)]
    pub busy_poll_interval: Option<Duration>,
    /// How long to keep polling after the last event before sleeping until a NOTIFY; 0s: never [default: 10ms].
    #[arg(long, env = "POSTBOX_BUSY_POLL_FOR", value_parser = duration)]
    pub busy_poll_for: Option<Duration>,
    /// How often partitions are rebalanced between relay instances [default: 1s].
    #[arg(long, env = "POSTBOX_REBALANCE_INTERVAL", value_parser = duration)]
    pub rebalance_interval: Option<Duration>,
    /// Longest wait for the broker to acknowledge a batch [default: 10s].
    #[arg(long, env = "POSTBOX_PUBLISH_TIMEOUT", value_parser = duration)]
    pub publish_timeout: Option<Duration>,
    /// First backoff after a transient broker/database failure [default: 100ms].
    #[arg(long, env = "POSTBOX_BACKOFF_MIN", value_parser = duration)]
    pub backoff_min: Option<Duration>,
    /// Longest backoff after transient failures [default: 5s].
    #[arg(long, env = "POSTBOX_BACKOFF_MAX", value_parser = duration)]
    pub backoff_max: Option<Duration>,
    /// Delivered rows: mark (sent_at, deleted by retention later) or delete at once [default: mark].
    #[arg(long, env = "POSTBOX_SENT")]
    pub sent: Option<postbox_relay::SentRows>,
    /// Topic patterns whose rows block their key instead of being dead-lettered, comma-separated [default: none].
    #[arg(long, env = "POSTBOX_BLOCK_TOPICS", value_delimiter = ',')]
    pub block_topics: Option<Vec<String>>,
    /// Poison failures before an event is dead-lettered [default: 10].
    #[arg(long, env = "POSTBOX_MAX_ATTEMPTS")]
    pub max_attempts: Option<i32>,
    /// First retry delay after a poison failure [default: 1s].
    #[arg(long, env = "POSTBOX_RETRY_BASE", value_parser = duration)]
    pub retry_base: Option<Duration>,
    /// Longest retry delay after poison failures [default: 5m].
    #[arg(long, env = "POSTBOX_RETRY_MAX", value_parser = duration)]
    pub retry_max: Option<Duration>,
    /// Redis URL for BullMQ (redis:// or rediss://) [default: redis://127.0.0.1:6379]. Falls back to REDIS_URL.
    #[arg(long, env = "POSTBOX_REDIS_URL", hide_env_values = true)]
    pub redis_url: Option<String>,
    /// BullMQ key prefix [default: bull].
    #[arg(long, env = "POSTBOX_BULLMQ_PREFIX")]
    pub bullmq_prefix: Option<String>,
    /// Accepted BullMQ job data: object or any [default: object].
    #[arg(long, env = "POSTBOX_BULLMQ_PAYLOAD", value_parser = parse_payload)]
    pub bullmq_payload: Option<PayloadPolicy>,
    /// How the BullMQ sink sends a batch: transaction (one MULTI/EXEC) or waves (one round trip per event of a key) [default: transaction].
    #[arg(long, env = "POSTBOX_BULLMQ_PUBLISH", value_parser = parse_publish)]
    pub bullmq_publish: Option<PublishMode>,
    /// Largest BullMQ job data in bytes [default: 1048576].
    #[arg(long, env = "POSTBOX_BULLMQ_MAX_JOB_BYTES")]
    pub bullmq_max_job_bytes: Option<usize>,
    /// Sent outbox rows older than this are deleted [default: 1h].
    #[arg(long, env = "POSTBOX_OUTBOX_RETENTION", value_parser = duration)]
    pub outbox_retention: Option<Duration>,
    /// Inbox rows older than this are deleted [default: 7d].
    #[arg(long, env = "POSTBOX_INBOX_RETENTION", value_parser = duration)]
    pub inbox_retention: Option<Duration>,
    /// Dead letters older than this are deleted [default: 30d].
    #[arg(long, env = "POSTBOX_DEAD_LETTER_RETENTION", value_parser = duration)]
    pub dead_letter_retention: Option<Duration>,
    /// How often retention runs, one relay instance at a time [default: 30s].
    #[arg(long, env = "POSTBOX_MAINTENANCE_INTERVAL", value_parser = duration)]
    pub maintenance_interval: Option<Duration>,
    /// How often the pending/lag gauges are refreshed [default: 5s].
    #[arg(long, env = "POSTBOX_STATS_INTERVAL", value_parser = duration)]
    pub stats_interval: Option<Duration>,
    /// Serve /metrics, /healthz and /readyz on this address, e.g. 127.0.0.1:9187 [default: off].
    #[arg(long, env = "POSTBOX_ADMIN_LISTEN")]
    pub admin_listen: Option<String>,
    /// Sink for events no route matches [default: bullmq].
    #[arg(long, env = "POSTBOX_SINK", value_enum)]
    pub sink: Option<SinkKind>,
    /// Kafka bootstrap servers [default: 127.0.0.1:9092].
    #[arg(long, env = "POSTBOX_KAFKA_BROKERS")]
    pub kafka_brokers: Option<String>,
    /// Kafka message value: payload or envelope [default: payload].
    #[arg(long, env = "POSTBOX_KAFKA_VALUE", value_parser = parse_value)]
    pub kafka_value: Option<postbox_kafka::ValueFormat>,
    /// How long librdkafka may try to deliver one message, in ms [default: 5000].
    #[arg(long, env = "POSTBOX_KAFKA_MESSAGE_TIMEOUT_MS")]
    pub kafka_message_timeout_ms: Option<u64>,
}

fn parse_value(s: &str) -> Result<postbox_kafka::ValueFormat, String> {
    match s {
        "payload" => Ok(postbox_kafka::ValueFormat::Payload),
        "envelope" => Ok(postbox_kafka::ValueFormat::Envelope),
        _ => Err(format!("{s:?}: use payload or envelope")),
    }
}

fn parse_payload(s: &str) -> Result<PayloadPolicy, String> {
    match s {
        "object" => Ok(PayloadPolicy::Object),
        "any" => Ok(PayloadPolicy::Any),
        _ => Err(format!("{s:?}: use object or any")),
    }
}

fn parse_publish(s: &str) -> Result<PublishMode, String> {
    match s {
        "transaction" => Ok(PublishMode::Transaction),
        "waves" => Ok(PublishMode::Waves),
        _ => Err(format!("{s:?}: use transaction or waves")),
    }
}

impl Settings {
    /// Load the file (if any) and apply the overrides. Validation happens in
    /// the relay and sink constructors, once.
    pub fn load(o: &Overrides) -> Result<Settings, CliError> {
        let mut s = match &o.config {
            Some(path) => {
                let text = std::fs::read_to_string(path)
                    .map_err(|e| format!("cannot read config file {}: {e}", path.display()))?;
                toml::from_str::<Settings>(&text)
                    .map_err(|e| format!("invalid config file {}: {e}", path.display()))?
            }
            None => Settings::default(),
        };
        let r = &mut s.relay;
        if let Some(v) = &o.database_url {
            r.database_url = Secret::new(v.clone());
        } else if r.database_url.expose().is_empty() {
            if let Ok(v) = std::env::var("DATABASE_URL") {
                r.database_url = Secret::new(v);
            }
        }
        macro_rules! set {
            ($($field:ident),*) => { $( if let Some(v) = o.$field.clone() { r.$field = v; } )* };
        }
        set!(
            schemas,
            workers,
            batch_size,
            poll_interval,
            busy_poll_interval,
            busy_poll_for,
            rebalance_interval,
            publish_timeout,
            backoff_min,
            backoff_max,
            max_attempts,
            retry_base,
            retry_max,
            block_topics,
            sent,
            outbox_retention,
            inbox_retention,
            dead_letter_retention,
            maintenance_interval,
            stats_interval
        );
        if let Some(v) = &o.admin_listen {
            s.admin_listen = Some(v.clone());
        }
        let b = &mut s.bullmq;
        if let Some(v) = &o.redis_url {
            b.redis_url = Secret::new(v.clone());
        } else if o.config.is_none() || b.redis_url == BullmqConfig::default().redis_url {
            if let Ok(v) = std::env::var("REDIS_URL") {
                b.redis_url = Secret::new(v);
            }
        }
        if let Some(v) = &o.bullmq_prefix {
            b.prefix = v.clone();
        }
        if let Some(v) = o.bullmq_payload {
            b.payload = v;
        }
        if let Some(v) = o.bullmq_publish {
            b.publish = v;
        }
        if let Some(v) = o.bullmq_max_job_bytes {
            b.max_job_bytes = v;
        }
        if let Some(v) = o.sink {
            s.sink = v;
        }
        let k = &mut s.kafka;
        if let Some(v) = &o.kafka_brokers {
            k.brokers = v.clone();
        }
        if let Some(v) = o.kafka_value {
            k.value = v;
        }
        if let Some(v) = o.kafka_message_timeout_ms {
            k.message_timeout_ms = v;
        }
        Ok(s)
    }
}
