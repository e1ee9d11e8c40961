//! The sinks this binary can publish to. Each is a config section of its own
//! crate; adding a broker adds one line here.

use super::fields::{self, Field};
use postbox_relay::{Config, Destination, SinkConfig};
use std::sync::Arc;

/// A sink kind, by the name of its table.
pub struct SinkKind {
    /// Its table and the value of `sink = "…"`.
    pub name: &'static str,
    /// For headings.
    pub title: &'static str,
    /// Its settings.
    pub fields: fn() -> Vec<Field>,
    /// Build it from its table (absent keys take its defaults).
    pub build: fn(toml::Value, &Config, Option<&std::path::Path>) -> Result<Built, crate::CliError>,
    /// Its table with the defaults filled in.
    pub effective: fn(toml::Value) -> Result<toml::Value, crate::CliError>,
}

/// A built sink and what to log about it.
pub struct Built {
    pub destination: Arc<dyn Destination>,
    pub describe: String,
}

const fn kind<C: SinkConfig>(title: &'static str) -> SinkKind {
    SinkKind {
        name: C::NAME,
        title,
        fields: fields::of::<C>,
        build: build::<C>,
        effective: effective::<C>,
    }
}

fn build<C: SinkConfig>(
    table: toml::Value,
    relay: &Config,
    file: Option<&std::path::Path>,
) -> Result<Built, crate::CliError> {
    let config: C = table
        .try_into()
        .map_err(|e| super::invalid(file, &format!("[{}]", C::NAME), &e))?;
    let describe = config.describe();
    Ok(Built {
        destination: config.build(relay)?,
        describe,
    })
}

fn effective<C: SinkConfig>(table: toml::Value) -> Result<toml::Value, crate::CliError> {
    let config: C = table
        .try_into()
        .map_err(|e| format!("invalid [{}] settings: {e}", C::NAME))?;
    Ok(toml::Value::try_from(config)?)
}

pub const SINKS: &[SinkKind] = &[
    kind::<postbox_bullmq::BullmqConfig>("BullMQ"),
    #[cfg(feature = "kafka")]
    kind::<postbox_kafka::KafkaConfig>("Kafka"),
    #[cfg(feature = "rabbitmq")]
    kind::<postbox_rabbitmq::RabbitmqConfig>("RabbitMQ"),
    #[cfg(feature = "nats")]
    kind::<postbox_nats::NatsConfig>("NATS JetStream"),
    #[cfg(feature = "redis-streams")]
    kind::<postbox_redis_streams::RedisStreamsConfig>("Redis Streams"),
    #[cfg(feature = "webhook")]
    kind::<postbox_webhook::WebhookConfig>("HTTP webhooks"),
    #[cfg(feature = "sqs")]
    kind::<postbox_sqs::SqsConfig>("Amazon SQS"),
    #[cfg(feature = "sqs")]
    kind::<postbox_sqs::SnsConfig>("Amazon SNS"),
];

/// Every sink postbox has, with the cargo feature that builds it in.
const FEATURES: &[(&str, &str)] = &[
    ("kafka", "kafka"),
    ("rabbitmq", "rabbitmq"),
    ("nats", "nats"),
    ("redis_streams", "redis-streams"),
    ("webhook", "webhook"),
    ("sqs", "sqs"),
    ("sns", "sqs"),
];

/// The sink kind called `name`, or an error listing the known ones (and
/// the feature to build in, for one left out of this build).
pub fn find(name: &str) -> Result<&'static SinkKind, crate::CliError> {
    SINKS.iter().find(|s| s.name == name).ok_or_else(|| {
        let known: Vec<&str> = SINKS.iter().map(|s| s.name).collect();
        match FEATURES.iter().find(|(sink, _)| *sink == name) {
            Some((_, feature)) => format!(
                "sink {name:?} is not in this build of postbox (built without the cargo feature {feature:?}; it has {}): \
                 build it with `cargo install --locked … postbox-cli --features {feature}`, or without --no-default-features",
                known.join(", ")
            ),
            None => format!("unknown sink {name:?}: this postbox has {}", known.join(", ")),
        }
        .into()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The settings a sink cannot start without, and nothing else.
    fn required(sink: &str) -> toml::Value {
        let table = match sink {
            "webhook" => {
                r#"url = "https://hooks.example.com/{topic}"
                           secrets = ["whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"]"#
            }
            "sqs" => r#"queue_url = "https://sqs.eu-west-1.amazonaws.com/1/{topic}.fifo""#,
            "sns" => r#"topic_arn = "arn:aws:sns:eu-west-1:1:{topic}.fifo""#,
            "bullmq" | "kafka" | "rabbitmq" | "nats" | "redis_streams" => "",
            other => panic!("say which settings sink {other:?} requires in this test"),
        };
        toml::from_str(table).unwrap()
    }

    /// Defaults must pass the checks the relay runs at start-up, for every
    /// sink and against the relay's own defaults (webhook.timeout once
    /// equalled publish_timeout and refused to start).
    #[tokio::test]
    async fn every_sink_starts_with_only_its_required_settings() {
        let relay = Config {
            database_url: postbox_relay::Secret::new("postgres://localhost/app"),
            ..Config::default()
        };
        relay.validate().expect("the relay's defaults are valid");
        for sink in SINKS {
            if let Err(e) = (sink.build)(required(sink.name), &relay, None) {
                panic!("sink {} refuses its own defaults: {e}", sink.name);
            }
        }
    }

    /// A broker client's own deadline must be shorter than the relay's
    /// publish_timeout: one rule, for every sink that has such a deadline,
    /// naming the setting and the fix.
    #[cfg(all(feature = "kafka", feature = "nats", feature = "webhook"))]
    #[tokio::test]
    async fn a_client_timeout_as_long_as_publish_timeout_is_refused_by_name() {
        let relay = Config {
            database_url: postbox_relay::Secret::new("postgres://localhost/app"),
            publish_timeout: std::time::Duration::from_secs(2),
            ..Config::default()
        };
        for (sink, key) in [
            ("kafka", "message_timeout"),
            ("nats", "ack_timeout"),
            ("webhook", "timeout"),
        ] {
            let s = SINKS.iter().find(|s| s.name == sink).unwrap();
            let mut table = required(sink);
            table
                .as_table_mut()
                .unwrap()
                .insert(key.into(), toml::Value::String("2s".into()));
            let e = match (s.build)(table, &relay, None) {
                Ok(_) => panic!("{sink}.{key} = 2s was accepted with publish_timeout 2s"),
                Err(e) => e.to_string(),
            };
            assert!(
                e.contains(&format!("{sink}.{key}"))
                    && e.contains("must be shorter than relay.publish_timeout (2s)"),
                "{e}"
            );
        }
    }
}
