//! Settings of the NATS JetStream sink (`[nats]` in the relay's config file).

use serde::{Deserialize, Serialize};
use std::time::Duration;

/// NATS JetStream sink settings (`[nats]` in the config file).
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct NatsConfig {
    /// Server URL (`nats://user:password@host:4222`, `tls://…`; several
    /// comma-separated).
    pub url: postbox_relay::Secret,
    /// Subject an event is published to: `{topic}` and `{key}` are replaced by
    /// the event's (e.g. `orders.{key}` for per-key subjects). A stream must
    /// capture it; postbox creates none.
    pub subject: String,
    /// Per-topic subjects, over `subject` (`[nats.topics] orders =
    /// "shop.orders.{key}"`).
    pub topics: std::collections::BTreeMap<String, String>,
    /// How long to wait for the stream's acknowledgement of one message; must
    /// be shorter than the relay's `publish_timeout`.
    #[serde(with = "humantime_serde")]
    #[schemars(with = "postbox_relay::HumanDuration")]
    pub ack_timeout: Duration,
    /// A `.creds` file (JWT and NKey seed) for servers with decentralised auth.
    pub credentials_file: Option<std::path::PathBuf>,
    /// `postbox` (the `postbox-*` headers, the payload as the body) or
    /// `cloudevents` (CloudEvents 1.0, by its NATS binding).
    pub format: postbox_relay::cloudevents::Format,
    /// With `format = "cloudevents"`: `binary` (attributes as `ce-*` headers, the payload as
    /// the body) or `structured` (the whole event as an
    /// `application/cloudevents+json` body).
    pub cloudevents_mode: postbox_relay::cloudevents::Mode,
}

impl Default for NatsConfig {
    fn default() -> Self {
        NatsConfig {
            url: postbox_relay::Secret::new("nats://127.0.0.1:4222"),
            subject: "{topic}".into(),
            topics: Default::default(),
            ack_timeout: Duration::from_secs(5),
            credentials_file: None,
            format: Default::default(),
            cloudevents_mode: Default::default(),
        }
    }
}

impl postbox_relay::Section for NatsConfig {
    const NAME: &'static str = "nats";
}

impl postbox_relay::SinkConfig for NatsConfig {
    type Sink = crate::NatsSink;

    fn sink(self, relay: &postbox_relay::Config) -> Result<Self::Sink, postbox_relay::ConfigError> {
        let ce = postbox_relay::cloudevents::CloudEvents::for_sink(
            self.format,
            self.cloudevents_mode,
            relay,
        )?;
        Ok(crate::NatsSink::new(self)?.with_cloudevents(ce))
    }

    fn client_timeout(&self) -> Option<(&'static str, std::time::Duration)> {
        Some(("nats.ack_timeout", self.ack_timeout))
    }

    fn describe(&self) -> String {
        format!("NATS JetStream at {} (subject {})", self.url, self.subject)
    }
}

impl NatsConfig {
    /// The servers of `url` (comma-separated: the client tries them in turn
    /// and reconnects to another when one goes).
    pub fn servers(&self) -> Result<Vec<async_nats::ServerAddr>, postbox_relay::ConfigError> {
        let invalid = |reason: String| postbox_relay::ConfigError {
            field: "nats.url",
            reason,
        };
        self.url
            .expose()
            .split(',')
            .map(str::trim)
            .filter(|u| !u.is_empty())
            .map(|u| {
                u.parse::<async_nats::ServerAddr>().map_err(|e| {
                    invalid(format!(
                        "{} is not a NATS URL ({e}): write nats://host:4222 (tls://… for TLS), several comma-separated",
                        postbox_relay::Secret::new(u.to_owned())
                    ))
                })
            })
            .collect::<Result<Vec<_>, _>>()
            .and_then(|v| {
                if v.is_empty() {
                    Err(invalid("no server given".to_owned()))
                } else {
                    Ok(v)
                }
            })
    }

    /// Check the settings once at start-up.
    pub fn validate(&self) -> Result<(), postbox_relay::ConfigError> {
        let err = |field, reason: String| Err(postbox_relay::ConfigError { field, reason });
        self.servers()?;
        if !self.subject.is_empty()
            && !self.subject.contains("{topic}")
            && !self.subject.contains("{key}")
        {
            return err(
                "nats.subject",
                format!(
                    "{:?} names neither {{topic}} nor {{key}}: every event would go to one subject; write e.g. \"{{topic}}\" or \"events.{{topic}}\"",
                    self.subject
                ),
            );
        }
        SUBJECT.validate(&self.subject, &self.topics)?;
        if self.ack_timeout < Duration::from_millis(100) {
            return err(
                "nats.ack_timeout",
                format!("{:?} is too short (at least 100ms)", self.ack_timeout),
            );
        }
        Ok(())
    }

    /// The subject of an event, or why it has none.
    pub fn subject_for(
        &self,
        topic: &str,
        key: Option<&str>,
    ) -> Result<String, postbox_relay::TargetError> {
        SUBJECT.fill(&self.subject, &self.topics, topic, key)
    }
}

/// The subject setting, in the vocabulary every sink's destination has.
const SUBJECT: postbox_relay::Template = postbox_relay::Template {
    setting: "nats.subject",
    per_topic: "nats.topics",
    what: "subject",
    key: true,
    escape: postbox_relay::target::verbatim,
    check: |s| valid_subject(s).map_err(str::to_owned),
    example: "events.{topic}",
};

/// A subject one can publish to: dot-separated non-empty tokens of printable
/// characters without spaces or wildcards.
pub(crate) fn valid_subject(s: &str) -> Result<(), &'static str> {
    if s.is_empty() || s.len() > 4096 {
        return Err("empty or longer than 4096 bytes");
    }
    if s.split('.').any(str::is_empty) {
        return Err("has an empty token (leading, trailing or double '.')");
    }
    if s.chars()
        .any(|c| c.is_whitespace() || c.is_control() || c == '*' || c == '>')
    {
        return Err("has whitespace or a wildcard ('*', '>'); publish subjects cannot");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subjects_from_templates() {
        let mut c = NatsConfig::default();
        assert!(c.validate().is_ok());
        assert_eq!(c.subject_for("orders", None).unwrap(), "orders");
        c.subject = "shop.{topic}.{key}".into();
        assert_eq!(
            c.subject_for("orders", Some("o-1")).unwrap(),
            "shop.orders.o-1"
        );
        assert!(c
            .subject_for("orders", None)
            .unwrap_err()
            .to_string()
            .contains("no key"));
        assert!(c.subject_for("orders", Some("a b")).is_err());
        assert!(c.subject_for("orders", Some("a.")).is_err());
        c.subject = "fixed".into();
        assert!(c.validate().is_err());
        c.subject = "{topic}".into();
        c.topics.insert("orders".into(), "shop.{key}".into());
        assert_eq!(c.subject_for("orders", Some("o-1")).unwrap(), "shop.o-1");
        assert_eq!(c.subject_for("users", Some("u-1")).unwrap(), "users");
        c.topics.insert("bad".into(), "a b.{topic}".into());
        let e = c.validate().unwrap_err().to_string();
        assert!(e.contains("nats.topics") && e.contains("bad"), "{e}");
        c.topics.clear();
        c.url = postbox_relay::Secret::new("nats://u:canary@h:4222");
        assert!(!format!("{c:?}").contains("canary"));
    }

    #[test]
    fn several_servers_comma_separated() {
        let mut c = NatsConfig {
            url: postbox_relay::Secret::new("nats://a:4222, nats://b:4223,"),
            ..Default::default()
        };
        assert_eq!(c.servers().unwrap().len(), 2);
        c.url = postbox_relay::Secret::new("nats://u:canary@a:4222,http://[bad");
        let e = c.validate().unwrap_err().to_string();
        assert!(e.contains("nats.url") && !e.contains("canary"), "{e}");
        c.url = postbox_relay::Secret::new(" , ");
        assert!(c.validate().is_err());
    }
}
