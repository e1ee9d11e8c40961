//! Settings of the Redis Streams sink (`[redis_streams]` in the relay's config file).

use serde::{Deserialize, Serialize};

/// How the sink sends a batch in which some key has more than one event.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum PublishMode {
    /// The whole batch as one Lua script (`EVALSHA`) that appends every entry
    /// in order, or none: one round trip per batch. An ACL user needs
    /// `+evalsha +script|load +type` besides `+xadd`; without them each such
    /// batch is refused the script and goes in waves.
    #[default]
    Script,
    /// One event per key per awaited pipeline of `XADD`s: a batch *d* events
    /// deep in one key takes *d* round trips. Needs `+xadd` only.
    Waves,
}

/// Redis Streams sink settings (`[redis_streams]` in the config file).
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct RedisStreamsConfig {
    /// Redis URL (`redis://user:password@host:6379/0`, `rediss://…` for TLS).
    pub url: postbox_relay::Secret,
    /// Stream an event is appended to: `{topic}` is replaced by the event's
    /// topic (e.g. `events:{topic}`).
    pub stream: String,
    /// Per-topic streams, over `stream` (`[redis_streams.topics] orders =
    /// "shop:orders"`).
    pub topics: std::collections::BTreeMap<String, String>,
    /// Trim each stream to about this many entries as it grows (`XADD MAXLEN ~`).
    /// Unset: never trimmed (consumers and retention decide). Entries a
    /// consumer group has not read yet are trimmed too: keep it well above
    /// any backlog.
    pub maxlen: Option<u64>,
    /// How a batch with keys more than one event deep is sent: `script`
    /// (one round trip) or `waves` (one per event of the deepest key).
    pub publish: PublishMode,
    /// `postbox` (fields `id`, `event`, `key`, `headers` and `payload`) or
    /// `cloudevents` (CloudEvents 1.0; no binding exists for Redis Streams:
    /// fields named as HTTP's binding names headers).
    pub format: postbox_relay::cloudevents::Format,
    /// With `format = "cloudevents"`: `binary` (attributes as `ce-*`
    /// fields, `content-type`, the payload in field `payload`) or
    /// `structured` (`content-type` = `application/cloudevents+json`, the
    /// whole event in field `payload`).
    pub cloudevents_mode: postbox_relay::cloudevents::Mode,
}

impl Default for RedisStreamsConfig {
    fn default() -> Self {
        RedisStreamsConfig {
            url: postbox_relay::Secret::new("redis://127.0.0.1:6379"),
            stream: "{topic}".into(),
            topics: Default::default(),
            maxlen: None,
            publish: PublishMode::default(),
            format: Default::default(),
            cloudevents_mode: Default::default(),
        }
    }
}

impl postbox_relay::Section for RedisStreamsConfig {
    const NAME: &'static str = "redis_streams";
}

impl postbox_relay::SinkConfig for RedisStreamsConfig {
    type Sink = crate::RedisStreamsSink;

    fn sink(self, relay: &postbox_relay::Config) -> Result<Self::Sink, postbox_relay::ConfigError> {
        let ce = postbox_relay::cloudevents::CloudEvents::for_sink(
            self.format,
            self.cloudevents_mode,
            relay,
        )?;
        Ok(crate::RedisStreamsSink::new(self)?.with_cloudevents(ce))
    }

    fn describe(&self) -> String {
        format!(
            "Redis Streams at {} (stream {})",
            self.url.redacted(),
            self.stream
        )
    }
}

impl RedisStreamsConfig {
    /// Check the settings once at start-up.
    pub fn validate(&self) -> Result<(), postbox_relay::ConfigError> {
        let err = |field, reason: String| Err(postbox_relay::ConfigError { field, reason });
        if let Err(e) = redis::Client::open(self.url.expose()) {
            return err(
                "redis_streams.url",
                format!(
                    "{} is not a Redis URL ({e}): write redis://host:6379 (rediss:// for TLS)",
                    self.url.redacted()
                ),
            );
        }
        STREAM.validate(&self.stream, &self.topics)?;
        if !self.stream.is_empty() && !self.stream.contains("{topic}") {
            return err(
                "redis_streams.stream",
                format!(
                    "{:?} does not name {{topic}}: every topic would share one stream; write e.g. \"{{topic}}\" or \"events:{{topic}}\"",
                    self.stream
                ),
            );
        }
        if self.maxlen == Some(0) {
            return err(
                "redis_streams.maxlen",
                "0 would trim every entry: leave it unset, or give the length to keep".into(),
            );
        }
        Ok(())
    }

    /// The stream of an event's topic, or why it has none.
    pub fn stream_for(&self, topic: &str) -> Result<String, postbox_relay::TargetError> {
        STREAM.fill(&self.stream, &self.topics, topic, None)
    }
}

/// The stream setting, in the vocabulary every sink's destination has.
const STREAM: postbox_relay::Template = postbox_relay::Template {
    setting: "redis_streams.stream",
    per_topic: "redis_streams.topics",
    what: "stream key",
    key: false,
    escape: postbox_relay::target::verbatim,
    check: postbox_relay::target::accept_any,
    example: "events:{topic}",
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_hides_the_password() {
        let c = RedisStreamsConfig {
            url: postbox_relay::Secret::new("redis://:hunter2@127.0.0.1:6379"),
            ..Default::default()
        };
        let shown = format!("{c:?}");
        assert!(
            !shown.contains("hunter2") && shown.contains("***"),
            "{shown}"
        );
    }

    #[test]
    fn streams_from_the_template_and_bad_settings_named() {
        let mut c = RedisStreamsConfig::default();
        assert!(c.validate().is_ok());
        assert_eq!(c.stream_for("orders").unwrap(), "orders");
        c.stream = "events:{topic}".into();
        assert_eq!(c.stream_for("orders").unwrap(), "events:orders");
        c.topics.insert("orders".into(), "shop:orders".into());
        assert_eq!(c.stream_for("orders").unwrap(), "shop:orders");
        c.topics.insert("users".into(), "{topic}:{key}".into());
        assert!(c
            .validate()
            .unwrap_err()
            .to_string()
            .contains("redis_streams.topics"));
        c.topics.clear();
        c.stream = "events".into();
        assert!(c
            .validate()
            .unwrap_err()
            .to_string()
            .contains("redis_streams.stream"));
        c.stream = "{topic}".into();
        c.maxlen = Some(0);
        assert!(c
            .validate()
            .unwrap_err()
            .to_string()
            .contains("redis_streams.maxlen"));
        c.maxlen = None;
        c.url = postbox_relay::Secret::new("http://u:canary@h");
        let e = c.validate().unwrap_err().to_string();
        assert!(
            e.contains("redis_streams.url") && !e.contains("canary"),
            "{e}"
        );
        assert!(!format!("{c:?}").contains("canary"));
    }
}
