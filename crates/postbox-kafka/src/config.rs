//! Settings of the Kafka sink (`[kafka]` in the relay's config file).

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::time::Duration;

/// Kafka sink settings (`[kafka]` in the config file).
#[derive(Clone, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct KafkaConfig {
    /// Bootstrap servers, comma-separated `host:port`.
    pub brokers: String,
    /// Kafka topic an event is produced to: `{topic}` is replaced by the
    /// event's topic (e.g. `shop.{topic}`).
    pub topic: String,
    /// Per-topic Kafka topics, over `topic` (`[kafka.topics]
    /// "payment.completed" = "payments"`). Formerly `topic_map`.
    pub topics: BTreeMap<String, String>,
    /// Message value: `payload` (the payload JSON) or `envelope`
    /// (`{id, type, key, timestamp, data}`, as webhooks' `body`).
    pub value: ValueFormat,
    /// How long librdkafka may try to deliver one message; must be shorter
    /// than the relay's `publish_timeout`.
    #[serde(with = "humantime_serde")]
    #[schemars(with = "postbox_relay::HumanDuration")]
    pub message_timeout: Duration,
    /// Extra librdkafka properties (`security.protocol`, `sasl.*`, `ssl.*`,
    /// `compression.type`...). Properties that postbox's guarantees depend on
    /// (`enable.idempotence`, `acks`, `max.in.flight.requests.per.connection`,
    /// `transactional.id`) cannot be overridden.
    pub properties: BTreeMap<String, String>,
    /// How a batch with a deep key is sent: `transaction` (one Kafka
    /// transaction, all its events at once) or `waves` (one awaited round of
    /// produce requests per event of the deepest key).
    pub publish: PublishMode,
    /// Start of the relay's transactional ids (`<prefix>-<random>-<n>`): with
    /// ACLs, grant the relay's principal Write on TransactionalId with this
    /// prefix. Used with `publish = "transaction"`.
    pub transactional_id_prefix: String,
    /// `postbox` (`postbox-*` headers, `value` as the value) or `cloudevents`
    /// (CloudEvents 1.0 by its Kafka binding; `value` must then be left at
    /// `payload`).
    pub format: postbox_relay::cloudevents::Format,
    /// With `format = "cloudevents"`: `binary` (attributes as `ce_*`
    /// headers, the payload as the value) or `structured` (the whole event
    /// as an `application/cloudevents+json` value).
    pub cloudevents_mode: postbox_relay::cloudevents::Mode,
}

/// How the sink sends a batch.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum PublishMode {
    /// The whole batch as one Kafka transaction: every event produced at
    /// once (librdkafka keeps each partition's order) and committed together,
    /// so `read_committed` consumers see all of it or none of it. A failed
    /// transaction is aborted and the batch sent again in `waves`. Where the
    /// broker refuses transactions (no ACL, no support), the sink says so and
    /// sends in waves.
    #[default]
    Transaction,
    /// One event per key per awaited round of produce requests (a batch of
    /// depth *d* per key takes *d* rounds); what a consumer reading
    /// `read_uncommitted` needs for per-key order through failures.
    Waves,
}

/// What a Kafka message's value holds.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum ValueFormat {
    /// The payload JSON as it is.
    #[default]
    Payload,
    /// `{"id", "type", "key", "timestamp", "data": payload}`: the envelope
    /// of the wire contract, the same on every sink that offers one.
    Envelope,
}

impl Default for KafkaConfig {
    fn default() -> Self {
        KafkaConfig {
            brokers: "127.0.0.1:9092".into(),
            topic: "{topic}".into(),
            topics: BTreeMap::new(),
            value: ValueFormat::Payload,
            message_timeout: Duration::from_secs(5),
            properties: BTreeMap::new(),
            publish: PublishMode::Transaction,
            transactional_id_prefix: "postbox".into(),
            format: Default::default(),
            cloudevents_mode: Default::default(),
        }
    }
}

impl std::fmt::Debug for KafkaConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Properties may hold SASL passwords and keys: print their names only.
        f.debug_struct("KafkaConfig")
            .field("brokers", &self.brokers)
            .field("topic", &self.topic)
            .field("topics", &self.topics)
            .field("value", &self.value)
            .field("message_timeout", &self.message_timeout)
            .field(
                "properties",
                &self
                    .properties
                    .keys()
                    .map(|k| format!("{k}=***"))
                    .collect::<Vec<_>>(),
            )
            .field("publish", &self.publish)
            .field("transactional_id_prefix", &self.transactional_id_prefix)
            .field("format", &self.format)
            .field("cloudevents_mode", &self.cloudevents_mode)
            .finish()
    }
}

/// Properties the sink sets itself: they are what keeps per-key order and
/// no-loss through retries.
pub(crate) const GUARDED: &[&str] = &[
    "enable.idempotence",
    "acks",
    "request.required.acks",
    "max.in.flight.requests.per.connection",
    "max.in.flight",
    "message.timeout.ms",
    "delivery.timeout.ms",
    "transactional.id",
    "transaction.timeout.ms",
];

impl postbox_relay::Section for KafkaConfig {
    const NAME: &'static str = "kafka";
    const RENAMED: &'static [postbox_relay::Renamed] = &[postbox_relay::Renamed {
        old: "topic_map",
        new: "topics",
    }];
}

impl postbox_relay::SinkConfig for KafkaConfig {
    type Sink = crate::KafkaSink;

    fn sink(self, relay: &postbox_relay::Config) -> Result<Self::Sink, postbox_relay::ConfigError> {
        let ce = postbox_relay::cloudevents::CloudEvents::for_sink(
            self.format,
            self.cloudevents_mode,
            relay,
        )?;
        Ok(crate::KafkaSink::new(self, relay.publish_timeout)?.with_cloudevents(ce))
    }

    fn client_timeout(&self) -> Option<(&'static str, std::time::Duration)> {
        Some(("kafka.message_timeout", self.message_timeout))
    }

    fn describe(&self) -> String {
        format!("Kafka at {}", self.brokers)
    }
}

impl KafkaConfig {
    /// Check the settings once at start-up.
    pub fn validate(&self) -> Result<(), postbox_relay::ConfigError> {
        let err = |field, reason: String| Err(postbox_relay::ConfigError { field, reason });
        if self.brokers.trim().is_empty() {
            return err("kafka.brokers", "empty: name at least one host:port".into());
        }
        if let Some(k) = self
            .properties
            .keys()
            .find(|k| GUARDED.contains(&k.as_str()))
        {
            return err(
                "kafka.properties",
                format!("{k} is set by postbox (idempotent producer, acks=all, bounded in-flight, its own transactional ids) and cannot be overridden"),
            );
        }
        let prefix = &self.transactional_id_prefix;
        if prefix.is_empty()
            || prefix.len() > 200
            || !prefix
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
        {
            return err(
                "kafka.transactional_id_prefix",
                format!("{prefix:?}: use 1–200 characters of letters, digits, '.', '_' and '-'"),
            );
        }
        if self.format == postbox_relay::cloudevents::Format::Cloudevents
            && self.value == ValueFormat::Envelope
        {
            return err(
                "kafka.value",
                "\"envelope\" and format = \"cloudevents\" both say what the value is: leave value at \"payload\" (cloudevents_mode = \"structured\" sends the whole event as the value)".into(),
            );
        }
        if self.message_timeout < Duration::from_millis(100) {
            return err(
                "kafka.message_timeout",
                format!("{:?} is too short (at least 100ms)", self.message_timeout),
            );
        }
        TOPIC.validate(&self.topic, &self.topics)
    }

    /// The producer's librdkafka settings: the user's properties, and the
    /// ones postbox's guarantees rest on (which `validate` keeps them from
    /// overriding).
    pub(crate) fn producer_config(&self) -> rdkafka::ClientConfig {
        let mut cc = rdkafka::ClientConfig::new();
        cc.set("bootstrap.servers", &self.brokers)
            .set("enable.idempotence", "true")
            .set("acks", "all")
            // Idempotence keeps order with up to 5 requests in flight per connection.
            .set("max.in.flight.requests.per.connection", "5")
            .set(
                "message.timeout.ms",
                self.message_timeout.as_millis().to_string(),
            )
            .set("linger.ms", "0")
            .set("allow.auto.create.topics", "false");
        for (k, v) in &self.properties {
            cc.set(k, v);
        }
        cc
    }

    /// The largest record value the producer accepts.
    pub(crate) fn max_message_bytes(&self) -> usize {
        self.properties
            .get("message.max.bytes")
            .and_then(|v| v.parse().ok())
            .unwrap_or(1_000_000)
    }

    /// The Kafka topic of an event's topic, or why it has none.
    pub fn topic_for(&self, outbox_topic: &str) -> Result<String, postbox_relay::TargetError> {
        TOPIC.fill(&self.topic, &self.topics, outbox_topic, None)
    }
}

/// The Kafka topic setting, in the vocabulary every sink's destination has.
const TOPIC: postbox_relay::Template = postbox_relay::Template {
    setting: "kafka.topic",
    per_topic: "kafka.topics",
    what: "Kafka topic name",
    key: false,
    escape: postbox_relay::target::verbatim,
    check: |t| {
        if valid_topic(t) {
            Ok(())
        } else {
            Err(
                "Kafka topic names are 1–249 characters of letters, digits, '.', '_' and '-'"
                    .into(),
            )
        }
    },
    example: "shop.{topic}",
};

/// Kafka's rule: 1–249 characters of `[a-zA-Z0-9._-]`, not `.` or `..`.
pub(crate) fn valid_topic(t: &str) -> bool {
    !t.is_empty()
        && t.len() <= 249
        && t != "."
        && t != ".."
        && t.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn guarded_properties_and_topics() {
        let mut c = KafkaConfig::default();
        assert!(c.validate().is_ok());
        c.properties.insert("acks".into(), "1".into());
        assert!(c
            .validate()
            .unwrap_err()
            .to_string()
            .contains("cannot be overridden"));
        c.properties.clear();
        c.topics
            .insert("payment.completed".into(), "payments".into());
        assert_eq!(c.topic_for("payment.completed").unwrap(), "payments");
        assert_eq!(c.topic_for("orders").unwrap(), "orders");
        c.topic = "shop.{topic}".into();
        assert_eq!(c.topic_for("orders").unwrap(), "shop.orders");
        assert!(c.topic_for("bad topic").is_err());
        c.topics.insert("x".into(), "bad topic".into());
        assert!(c.validate().is_err());
        c.topics.clear();
        c.topic = "{topic}.{key}".into();
        assert!(
            c.validate().is_err(),
            "no topic per key: the key picks the partition"
        );
        c.topic = "{topic}".into();
        c.properties.insert("sasl.password".into(), "canary".into());
        assert!(!format!("{c:?}").contains("canary"));
        c.properties.clear();
        c.properties
            .insert("transactional.id".into(), "mine".into());
        assert!(
            c.validate().is_err(),
            "transactional ids are the sink's own"
        );
        c.properties.clear();
        for bad in ["", "has space", "slash/"] {
            c.transactional_id_prefix = bad.into();
            let e = c.validate().unwrap_err().to_string();
            assert!(e.contains("transactional_id_prefix"), "{e}");
        }
        c.transactional_id_prefix = "orders.relay-1".into();
        assert!(c.validate().is_ok());
    }
}
