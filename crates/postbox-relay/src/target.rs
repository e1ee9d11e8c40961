//! Why an event has no destination on its sink: the sink's address template
//! (a subject, a queue URL, a topic ARN, a webhook URL) cannot be filled in
//! for it. Each is a rejection of that event; other events flow.

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
