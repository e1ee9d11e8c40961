//! Where an event goes on its sink, in one vocabulary for every sink: a
//! template for all topics (`nats.subject = "events.{topic}"`) and per-topic
//! overrides (`[nats.topics] orders = "shop.orders.{key}"`), with `{topic}`
//! and, where a destination per key makes sense, `{key}` filled in. A sink
//! describes its setting once as a [`Template`]; reading, checking and
//! error messages are the same everywhere. An event whose destination
//! cannot be made is a rejection of that event ([`TargetError`]); other
//! events flow.

use crate::ConfigError;
use std::borrow::Cow;
use std::collections::BTreeMap;

/// A sink's destination setting: its names, what it fills in, how a
/// filled-in destination is checked. One `const` per sink.
#[derive(Debug, Clone, Copy)]
pub struct Template {
    /// The template for every topic (`nats.subject`).
    pub setting: &'static str,
    /// Its per-topic table (`nats.topics`).
    pub per_topic: &'static str,
    /// What a destination is called in messages ("subject", "URL").
    pub what: &'static str,
    /// Whether `{key}` may appear (a destination per key).
    pub key: bool,
    /// Applied to the topic and key before they are put in (webhooks:
    /// percent-encoding); [`verbatim`] elsewhere.
    pub escape: fn(&str) -> Cow<'_, str>,
    /// Whether a filled-in destination is one the broker accepts, and why not.
    pub check: fn(&str) -> Result<(), String>,
    /// A sample value for messages (`"events.{topic}"`).
    pub example: &'static str,
}

/// Topic and key put in as they are.
pub fn verbatim(s: &str) -> Cow<'_, str> {
    Cow::Borrowed(s)
}

/// Any filled-in destination is accepted (the broker will say).
pub fn accept_any(_: &str) -> Result<(), String> {
    Ok(())
}

impl Template {
    /// The template of `topic`: its override, or the one for every topic.
    pub fn pick<'a>(
        &self,
        all: &'a str,
        per_topic: &'a BTreeMap<String, String>,
        topic: &str,
    ) -> Result<&'a str, TargetError> {
        let t = per_topic.get(topic).map_or(all, String::as_str);
        if t.is_empty() {
            return Err(TargetError::NotConfigured {
                setting: self.setting,
                setting_topics: self.per_topic,
                topic: topic.to_owned(),
            });
        }
        Ok(t)
    }

    /// The destination of an event of `topic` with `key`.
    pub fn fill(
        &self,
        all: &str,
        per_topic: &BTreeMap<String, String>,
        topic: &str,
        key: Option<&str>,
    ) -> Result<String, TargetError> {
        let template = self.pick(all, per_topic, topic)?;
        let mut out = template.replace("{topic}", &(self.escape)(topic));
        if self.key && out.contains("{key}") {
            let Some(key) = key else {
                return Err(TargetError::NoKey {
                    setting: self.setting_of(per_topic, topic),
                    template: template.to_owned(),
                });
            };
            out = out.replace("{key}", &(self.escape)(key));
        }
        (self.check)(&out).map_err(|reason| TargetError::Invalid {
            what: self.what,
            value: out.clone(),
            reason,
        })?;
        Ok(out)
    }

    /// Check the settings once at start-up: something is set, every
    /// `{placeholder}` is one this sink fills, and each template filled in
    /// with a sample is a destination the broker accepts.
    pub fn validate(
        &self,
        all: &str,
        per_topic: &BTreeMap<String, String>,
    ) -> Result<(), ConfigError> {
        if all.is_empty() && per_topic.is_empty() {
            return Err(ConfigError {
                field: self.setting,
                reason: format!(
                    "not set: write e.g. {} = {:?}, or a [{}] table",
                    self.setting, self.example, self.per_topic
                ),
            });
        }
        let named = std::iter::once((self.setting, None, all))
            .filter(|(_, _, t)| !t.is_empty())
            .chain(
                per_topic
                    .iter()
                    .map(|(topic, t)| (self.per_topic, Some(topic), t.as_str())),
            );
        for (field, topic, template) in named {
            let at = match topic {
                Some(topic) => format!("{template:?} (for topic {topic:?})"),
                None => format!("{template:?}"),
            };
            let err = |reason: String| ConfigError {
                field,
                reason: format!("{at}: {reason}"),
            };
            if let Some(unknown) = self.unknown_placeholder(template) {
                let known = if self.key {
                    "{topic} and {key}"
                } else {
                    "{topic}"
                };
                return Err(err(format!(
                    "{{{unknown}}} is not filled in here: {} templates take {known}",
                    self.setting
                )));
            }
            let sample = self.fill(template, &BTreeMap::new(), "topic", Some("key"));
            if let Err(TargetError::Invalid { reason, .. }) = sample {
                return Err(err(format!(
                    "not a valid {} ({reason}): e.g. {:?}",
                    self.what, self.example
                )));
            }
        }
        Ok(())
    }

    /// The first `{name}` in `template` this sink does not fill in.
    fn unknown_placeholder<'t>(&self, template: &'t str) -> Option<&'t str> {
        let mut rest = template;
        while let Some(open) = rest.find('{') {
            let after = &rest[open + 1..];
            let close = after.find('}')?;
            let name = &after[..close];
            let known = name == "topic" || (self.key && name == "key");
            if !known
                && !name.is_empty()
                && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
            {
                return Some(name);
            }
            rest = &after[close + 1..];
        }
        None
    }

    fn setting_of(&self, per_topic: &BTreeMap<String, String>, topic: &str) -> &'static str {
        if per_topic.contains_key(topic) {
            self.per_topic
        } else {
            self.setting
        }
    }
}

/// The event's destination cannot be made from the sink's settings.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TargetError {
    /// Neither the sink's default nor a per-topic destination is set.
    #[error("no {setting} for topic {topic:?}: set {setting}, or {setting_topics}.{topic}")]
    NotConfigured {
        /// The setting (`sqs.queue_url`).
        setting: &'static str,
        /// Its per-topic table (`sqs.topics`).
        setting_topics: &'static str,
        /// The event's topic.
        topic: String,
    },
    /// The template has `{key}` and the event has no key.
    #[error("the event has no key, and {setting} {template:?} needs one")]
    NoKey {
        /// The setting.
        setting: &'static str,
        /// The template.
        template: String,
    },
    /// Filled in, the destination is not one the broker accepts.
    #[error("{what} {value:?}: {reason}")]
    Invalid {
        /// "subject", "URL", ...
        what: &'static str,
        /// The filled-in destination.
        value: String,
        /// Why it is refused.
        reason: String,
    },
}

impl From<TargetError> for crate::SinkError {
    fn from(e: TargetError) -> Self {
        crate::SinkError::rejected(e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SUBJECT: Template = Template {
        setting: "x.subject",
        per_topic: "x.topics",
        what: "subject",
        key: true,
        escape: verbatim,
        check: |s| {
            if s.contains(' ') {
                Err("has a space".into())
            } else {
                Ok(())
            }
        },
        example: "events.{topic}",
    };

    fn topics(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect()
    }

    #[test]
    fn an_override_wins_over_the_template_for_every_topic() {
        let per = topics(&[("orders", "shop.{key}")]);
        assert_eq!(
            SUBJECT.fill("ev.{topic}", &per, "users", None).unwrap(),
            "ev.users"
        );
        assert_eq!(
            SUBJECT
                .fill("ev.{topic}", &per, "orders", Some("o-1"))
                .unwrap(),
            "shop.o-1"
        );
    }

    #[test]
    fn what_cannot_be_filled_in_is_named() {
        let per = topics(&[("orders", "shop.{key}")]);
        let e = SUBJECT.fill("", &per, "users", None).unwrap_err();
        assert_eq!(
            e.to_string(),
            "no x.subject for topic \"users\": set x.subject, or x.topics.users"
        );
        let e = SUBJECT.fill("", &per, "orders", None).unwrap_err();
        assert!(e.to_string().contains("x.topics"), "{e}");
        let e = SUBJECT
            .fill("{key}", &per, "users", Some("a b"))
            .unwrap_err();
        assert_eq!(e.to_string(), "subject \"a b\": has a space");
    }

    #[test]
    fn a_typo_in_a_placeholder_or_an_invalid_template_stops_the_start() {
        let e = SUBJECT
            .validate("ev.{topci}", &BTreeMap::new())
            .unwrap_err();
        assert_eq!(e.field, "x.subject");
        assert!(e.reason.contains("{topci}"), "{}", e.reason);
        let e = SUBJECT
            .validate("ev.{topic}", &topics(&[("orders", "a b")]))
            .unwrap_err();
        assert_eq!(e.field, "x.topics");
        assert!(
            e.reason.contains("orders") && e.reason.contains("space"),
            "{}",
            e.reason
        );
        let no_key = Template {
            key: false,
            ..SUBJECT
        };
        assert!(no_key.validate("{topic}.{key}", &BTreeMap::new()).is_err());
        assert!(SUBJECT.validate("", &BTreeMap::new()).is_err());
        assert!(SUBJECT.validate("", &topics(&[("orders", "o")])).is_ok());
    }
}
