//! Settings of the SQS and SNS sinks (`[sqs]`, `[sns]` in the relay's config file).

use postbox_relay::{ConfigError, TargetError, Template};
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
    /// `postbox` (the `postbox-*` message attributes, the payload as the
    /// body) or `cloudevents` (CloudEvents 1.0; no binding exists for SQS:
    /// message attributes named as HTTP's binding names headers).
    pub format: postbox_relay::cloudevents::Format,
    /// With `format = "cloudevents"`: `binary` (attributes as `ce-*` message
    /// attributes and `content-type`, `partitionkey` left to the FIFO group;
    /// at most 10 attributes in all) or `structured` (the whole event as
    /// the body, `content-type` = `application/cloudevents+json`).
    pub cloudevents_mode: postbox_relay::cloudevents::Mode,
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
    /// `postbox` (the `postbox-*` message attributes, the payload as the
    /// body) or `cloudevents` (CloudEvents 1.0; no binding exists for SNS:
    /// message attributes named as HTTP's binding names headers).
    pub format: postbox_relay::cloudevents::Format,
    /// With `format = "cloudevents"`: `binary` (attributes as `ce-*` message
    /// attributes and `content-type`, `partitionkey` left to the FIFO group;
    /// at most 10 attributes in all) or `structured` (the whole event as
    /// the body, `content-type` = `application/cloudevents+json`).
    pub cloudevents_mode: postbox_relay::cloudevents::Mode,
}

impl postbox_relay::Section for SqsConfig {
    const NAME: &'static str = "sqs";
}

impl postbox_relay::Section for SnsConfig {
    const NAME: &'static str = "sns";
}

impl postbox_relay::SinkConfig for SqsConfig {
    type Sink = crate::SqsSink;

    fn sink(self, relay: &postbox_relay::Config) -> Result<Self::Sink, postbox_relay::ConfigError> {
        let ce = postbox_relay::cloudevents::CloudEvents::for_sink(
            self.format,
            self.cloudevents_mode,
            relay,
        )?;
        Ok(crate::SqsSink::new(self)?.with_cloudevents(ce))
    }

    fn describe(&self) -> String {
        format!("Amazon SQS queue {}", self.queue_url)
    }
}

impl postbox_relay::SinkConfig for SnsConfig {
    type Sink = crate::SnsSink;

    fn sink(self, relay: &postbox_relay::Config) -> Result<Self::Sink, postbox_relay::ConfigError> {
        let ce = postbox_relay::cloudevents::CloudEvents::for_sink(
            self.format,
            self.cloudevents_mode,
            relay,
        )?;
        Ok(crate::SnsSink::new(self)?.with_cloudevents(ce))
    }

    fn describe(&self) -> String {
        format!("Amazon SNS topic {}", self.topic_arn)
    }
}

/// The queue URL setting, in the vocabulary every sink's destination has.
const QUEUE_URL: Template = Template {
    setting: "sqs.queue_url",
    per_topic: "sqs.topics",
    what: "queue URL",
    key: false,
    escape: postbox_relay::target::verbatim,
    check: |u| {
        if u.starts_with("https://") || u.starts_with("http://") {
            Ok(())
        } else {
            Err("not an http:// or https:// URL".into())
        }
    },
    example: "https://sqs.eu-west-1.amazonaws.com/123456789012/{topic}.fifo",
};

/// The topic ARN setting, in the vocabulary every sink's destination has.
const TOPIC_ARN: Template = Template {
    setting: "sns.topic_arn",
    per_topic: "sns.topics",
    what: "topic ARN",
    key: false,
    escape: postbox_relay::target::verbatim,
    check: |a| {
        if a.starts_with("arn:") && a.split(':').count() >= 6 {
            Ok(())
        } else {
            Err("an ARN is arn:<partition>:sns:<region>:<account>:<name>".into())
        }
    },
    example: "arn:aws:sns:eu-west-1:123456789012:{topic}",
};

/// `endpoint_url` of `setting`, if set, is an HTTP(S) URL.
fn check_endpoint(setting: &'static str, endpoint_url: Option<&str>) -> Result<(), ConfigError> {
    match endpoint_url {
        Some(e) if !(e.starts_with("http://") || e.starts_with("https://")) => Err(ConfigError {
            field: setting,
            reason: format!("{e:?} is not an http:// or https:// URL"),
        }),
        _ => Ok(()),
    }
}

impl SqsConfig {
    /// Check the settings once at start-up.
    pub fn validate(&self) -> Result<(), ConfigError> {
        QUEUE_URL.validate(&self.queue_url, &self.topics)?;
        check_endpoint("sqs.endpoint_url", self.endpoint_url.as_deref())
    }

    /// The queue of an event's topic.
    pub fn queue_for(&self, topic: &str) -> Result<String, TargetError> {
        QUEUE_URL.fill(&self.queue_url, &self.topics, topic, None)
    }
}

impl SnsConfig {
    /// Check the settings once at start-up.
    pub fn validate(&self) -> Result<(), ConfigError> {
        TOPIC_ARN.validate(&self.topic_arn, &self.topics)?;
        check_endpoint("sns.endpoint_url", self.endpoint_url.as_deref())
    }

    /// The topic ARN of an event's topic.
    pub fn arn_for(&self, topic: &str) -> Result<String, TargetError> {
        TOPIC_ARN.fill(&self.topic_arn, &self.topics, topic, None)
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
