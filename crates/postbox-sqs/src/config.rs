//! Settings of the SQS and SNS sinks (`[sqs]`, `[sns]` in the relay's config file).

use postbox_relay::TargetError;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Amazon SQS sink settings (`[sqs]` in the config file).
#[derive(Debug, Clone, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct SqsConfig {
    /// Queue URL an event is sent to: `{topic}` is replaced by the event's
    /// topic (e.g. `https://sqs.eu-west-1.amazonaws.com/123456789012/{topic}.fifo`).
    /// A URL ending in `.fifo` is a FIFO queue: group = the event's key,
    /// deduplication id = the event id.
    pub queue_url: String,
    /// Per-topic queue URLs (`[sqs.topics] orders = "https://…/orders.fifo"`).
    pub topics: BTreeMap<String, String>,
    /// AWS region (default: the standard chain: `AWS_REGION`, the profile).
    pub region: Option<String>,
    /// Endpoint instead of AWS's (a local SQS-compatible server, a VPC endpoint).
    pub endpoint_url: Option<String>,
}

/// Amazon SNS sink settings (`[sns]` in the config file).
#[derive(Debug, Clone, Default, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct SnsConfig {
    /// Topic ARN an event is published to: `{topic}` is replaced by the
    /// event's topic (e.g. `arn:aws:sns:eu-west-1:123456789012:{topic}.fifo`).
    /// An ARN ending in `.fifo` is a FIFO topic: group = the event's key,
    /// deduplication id = the event id.
    pub topic_arn: String,
    /// Per-topic ARNs (`[sns.topics] orders = "arn:aws:sns:…:orders"`).
    pub topics: BTreeMap<String, String>,
    /// AWS region (default: the standard chain: `AWS_REGION`, the profile).
    pub region: Option<String>,
    /// Endpoint instead of AWS's (a local SNS-compatible server, a VPC endpoint).
    pub endpoint_url: Option<String>,
}

impl postbox_relay::Section for SqsConfig {
    const NAME: &'static str = "sqs";
}

impl postbox_relay::Section for SnsConfig {
    const NAME: &'static str = "sns";
}

impl postbox_relay::SinkConfig for SqsConfig {
    type Sink = crate::SqsSink;

    fn sink(
        self,
        _relay: &postbox_relay::Config,
    ) -> Result<Self::Sink, postbox_relay::ConfigError> {
        crate::SqsSink::new(self)
    }

    fn describe(&self) -> String {
        format!("Amazon SQS queue {}", self.queue_url)
    }
}

impl postbox_relay::SinkConfig for SnsConfig {
    type Sink = crate::SnsSink;

    fn sink(
        self,
        _relay: &postbox_relay::Config,
    ) -> Result<Self::Sink, postbox_relay::ConfigError> {
        crate::SnsSink::new(self)
    }

    fn describe(&self) -> String {
        format!("Amazon SNS topic {}", self.topic_arn)
    }
}

/// The target of a topic from a template and per-topic overrides.
pub(crate) fn target(
    setting: &'static str,
    setting_topics: &'static str,
    template: &str,
    topics: &BTreeMap<String, String>,
    topic: &str,
) -> Result<String, TargetError> {
    let t = topics.get(topic).map(String::as_str).unwrap_or(template);
    if t.is_empty() {
        return Err(TargetError::NotConfigured {
            setting,
            setting_topics,
            topic: topic.to_owned(),
        });
    }
    Ok(t.replace("{topic}", topic))
}

pub(crate) fn validate_common(
    field: &'static str,
    template: &str,
    topics: &BTreeMap<String, String>,
    endpoint_url: Option<&str>,
    looks_right: fn(&str) -> bool,
    example: &str,
) -> Result<(), postbox_relay::ConfigError> {
    let err = |field, reason: String| Err(postbox_relay::ConfigError { field, reason });
    if template.is_empty() && topics.is_empty() {
        return err(field, format!("not set: e.g. {example}"));
    }
    for t in std::iter::once(template)
        .filter(|t| !t.is_empty())
        .chain(topics.values().map(String::as_str))
    {
        if !looks_right(&t.replace("{topic}", "t")) {
            return err(
                field,
                format!("{t:?} does not look like one: e.g. {example}"),
            );
        }
    }
    if let Some(e) = endpoint_url {
        if !(e.starts_with("http://") || e.starts_with("https://")) {
            return err(
                if field.starts_with("sqs") {
                    "sqs.endpoint_url"
                } else {
                    "sns.endpoint_url"
                },
                format!("{e:?} is not an http:// or https:// URL"),
            );
        }
    }
    Ok(())
}

impl SqsConfig {
    /// Check the settings once at start-up.
    pub fn validate(&self) -> Result<(), postbox_relay::ConfigError> {
        validate_common(
            "sqs.queue_url",
            &self.queue_url,
            &self.topics,
            self.endpoint_url.as_deref(),
            |u| u.starts_with("https://") || u.starts_with("http://"),
            "https://sqs.eu-west-1.amazonaws.com/123456789012/{topic}.fifo",
        )
    }

    /// The queue of an event's topic.
    pub fn queue_for(&self, topic: &str) -> Result<String, TargetError> {
        target(
            "sqs.queue_url",
            "sqs.topics",
            &self.queue_url,
            &self.topics,
            topic,
        )
    }
}

impl SnsConfig {
    /// Check the settings once at start-up.
    pub fn validate(&self) -> Result<(), postbox_relay::ConfigError> {
        validate_common(
            "sns.topic_arn",
            &self.topic_arn,
            &self.topics,
            self.endpoint_url.as_deref(),
            |a| a.starts_with("arn:") && a.split(':').count() >= 6,
            "arn:aws:sns:eu-west-1:123456789012:{topic}",
        )
    }

    /// The topic ARN of an event's topic.
    pub fn arn_for(&self, topic: &str) -> Result<String, TargetError> {
        target(
            "sns.topic_arn",
            "sns.topics",
            &self.topic_arn,
            &self.topics,
            topic,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_from_templates_and_bad_settings_named() {
        let mut q = SqsConfig {
            queue_url: "https://sqs.eu-west-1.amazonaws.com/1/{topic}.fifo".into(),
            ..Default::default()
        };
        assert!(q.validate().is_ok());
        assert_eq!(
            q.queue_for("orders").unwrap(),
            "https://sqs.eu-west-1.amazonaws.com/1/orders.fifo"
        );
        q.queue_url = "orders".into();
        assert!(q
            .validate()
            .unwrap_err()
            .to_string()
            .contains("sqs.queue_url"));
        assert!(SqsConfig::default().validate().is_err());
        let mut s = SnsConfig {
            topic_arn: "arn:aws:sns:eu-west-1:1:{topic}".into(),
            ..Default::default()
        };
        assert!(s.validate().is_ok());
        assert_eq!(s.arn_for("o").unwrap(), "arn:aws:sns:eu-west-1:1:o");
        s.endpoint_url = Some("localhost:4566".into());
        assert!(s
            .validate()
            .unwrap_err()
            .to_string()
            .contains("sns.endpoint_url"));
    }
}
