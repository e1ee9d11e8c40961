//! Settings of the RabbitMQ sink (`[rabbitmq]` in the relay's config file).

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// RabbitMQ sink settings (`[rabbitmq]` in the config file).
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct RabbitmqConfig {
    /// AMQP URL (`amqp://user:password@host:5672/vhost`, `amqps://…` for TLS;
    /// the default vhost `/` is `%2f`).
    pub url: postbox_relay::Secret,
    /// Exchange events are published to. Unset: an exchange named after the
    /// event's topic.
    pub exchange: Option<String>,
    /// Routing key: `key` (the event's key, or its topic when it has none) or
    /// `topic` (the event's topic: one named exchange, routed by topic).
    pub routing_key: RoutingKey,
    /// Per-topic overrides of `exchange` and `routing_key`
    /// (`[rabbitmq.topics.orders] exchange = "shop"`).
    pub topics: BTreeMap<String, TopicRoute>,
    /// Largest message body sent; larger events are refused (dead-lettered)
    /// before they reach the broker. Keep it at most the server's
    /// `max_message_size` (16 MiB by default since RabbitMQ 4.0).
    pub max_message_bytes: usize,
    /// For quick starts: declare each exchange (durable, type `topic`) and a
    /// durable queue named after the topic, with single active consumer,
    /// bound with `#`. Off by default: postbox declares nothing you did not
    /// ask for, and an event for an exchange that does not exist is refused.
    pub declare: bool,
    /// `postbox` (the `postbox-*` header and the `type` property, the payload as the body) or
    /// `cloudevents` (CloudEvents 1.0, by its AMQP binding).
    pub format: postbox_relay::cloudevents::Format,
    /// With `format = "cloudevents"`: `binary` (attributes as `cloudEvents:*` headers, the payload as
    /// the body) or `structured` (the whole event as an
    /// `application/cloudevents+json` body).
    pub cloudevents_mode: postbox_relay::cloudevents::Mode,
}

/// Where the routing key comes from.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum RoutingKey {
    /// The event's key, or its topic when it has none.
    #[default]
    Key,
    /// The event's topic.
    Topic,
}

/// One topic's exchange and routing key.
#[derive(Debug, Clone, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct TopicRoute {
    /// Exchange for this topic (default: the section's `exchange`).
    pub exchange: Option<String>,
    /// Routing key for this topic (default: the section's `routing_key`).
    pub routing_key: Option<RoutingKey>,
}

impl Default for RabbitmqConfig {
    fn default() -> Self {
        RabbitmqConfig {
            url: postbox_relay::Secret::new("amqp://guest:guest@127.0.0.1:5672/%2f"),
            exchange: None,
            routing_key: RoutingKey::Key,
            topics: BTreeMap::new(),
            max_message_bytes: 16 * 1024 * 1024,
            declare: false,
            format: Default::default(),
            cloudevents_mode: Default::default(),
        }
    }
}

impl postbox_relay::Section for RabbitmqConfig {
    const NAME: &'static str = "rabbitmq";
}

impl postbox_relay::SinkConfig for RabbitmqConfig {
    type Sink = crate::RabbitmqSink;

    fn sink(self, relay: &postbox_relay::Config) -> Result<Self::Sink, postbox_relay::ConfigError> {
        let ce = postbox_relay::cloudevents::CloudEvents::for_sink(
            self.format,
            self.cloudevents_mode,
            relay,
        )?;
        Ok(crate::RabbitmqSink::new(self)?.with_cloudevents(ce))
    }

    fn describe(&self) -> String {
        format!("RabbitMQ at {}", self.redacted_url())
    }
}

impl RabbitmqConfig {
    /// The URL with its password hidden, for logs.
    pub fn redacted_url(&self) -> String {
        self.url.redacted()
    }

    /// Check the settings once at start-up.
    pub fn validate(&self) -> Result<(), postbox_relay::ConfigError> {
        let err = |field, reason: String| Err(postbox_relay::ConfigError { field, reason });
        let url = self.url.expose();
        if !(url.starts_with("amqp://") || url.starts_with("amqps://")) {
            return err(
                "rabbitmq.url",
                format!(
                    "{} is not an AMQP URL: use amqp://user:password@host:5672/vhost (or amqps://)",
                    self.redacted_url()
                ),
            );
        }
        if self.max_message_bytes == 0 {
            return err("rabbitmq.max_message_bytes", "must be more than 0".into());
        }
        let names = self
            .exchange
            .iter()
            .map(|e| ("rabbitmq.exchange", e))
            .chain(
                self.topics
                    .values()
                    .filter_map(|t| t.exchange.as_ref())
                    .map(|e| ("rabbitmq.topics", e)),
            );
        for (field, name) in names {
            if let Err(reason) = valid_name(name) {
                return err(field, format!("exchange {name:?}: {reason}"));
            }
        }
        Ok(())
    }

    /// The exchange and routing key of an event.
    pub fn route<'a>(&'a self, topic: &'a str, key: Option<&'a str>) -> (&'a str, &'a str) {
        let over = self.topics.get(topic);
        let exchange = over
            .and_then(|t| t.exchange.as_deref())
            .or(self.exchange.as_deref())
            .unwrap_or(topic);
        let routing = over.and_then(|t| t.routing_key).unwrap_or(self.routing_key);
        let routing_key = match routing {
            RoutingKey::Key => key.unwrap_or(topic),
            RoutingKey::Topic => topic,
        };
        (exchange, routing_key)
    }
}

/// AMQP short strings: at most 255 bytes. Exchange names: letters, digits,
/// `-`, `_`, `.`, `:` (what RabbitMQ accepts without surprises).
pub(crate) fn valid_name(name: &str) -> Result<(), &'static str> {
    if name.is_empty() {
        return Err("empty (the default exchange cannot be named here)");
    }
    if name.len() > 255 {
        return Err("longer than 255 bytes");
    }
    if !name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | ':'))
    {
        return Err("use letters, digits, '-', '_', '.' and ':' only");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_hides_the_password() {
        let c = RabbitmqConfig {
            url: postbox_relay::Secret::new("amqp://guest:hunter2@127.0.0.1:5672/%2f"),
            ..Default::default()
        };
        let shown = format!("{c:?}");
        assert!(
            !shown.contains("hunter2") && shown.contains("***"),
            "{shown}"
        );
    }

    #[test]
    fn routes_and_overrides() {
        let mut c = RabbitmqConfig::default();
        assert!(c.validate().is_ok());
        assert_eq!(c.route("orders", Some("o:1")), ("orders", "o:1"));
        assert_eq!(c.route("orders", None), ("orders", "orders"));
        c.exchange = Some("shop".into());
        c.routing_key = RoutingKey::Topic;
        assert_eq!(c.route("orders", Some("o:1")), ("shop", "orders"));
        c.topics.insert(
            "audit".into(),
            TopicRoute {
                exchange: Some("audit-x".into()),
                routing_key: Some(RoutingKey::Key),
            },
        );
        assert_eq!(c.route("audit", Some("u:7")), ("audit-x", "u:7"));
        c.exchange = Some("bad name".into());
        assert!(c.validate().is_err());
        c.exchange = None;
        c.url = postbox_relay::Secret::new("amqp://u:canary@h/%2f");
        assert!(!format!("{c:?}").contains("canary"));
        c.url = postbox_relay::Secret::new("http://x");
        assert!(c.validate().is_err());
    }
}
