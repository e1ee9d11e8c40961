//! Amazon SQS and SNS for postbox: the relay's sinks ([`SqsSink`],
//! [`SnsSink`]: `SendMessageBatch` / `PublishBatch` of up to 10, each entry's
//! answer classified; on FIFO queues and topics `MessageGroupId` = the
//! event's key, so SQS keeps per-key order itself, and
//! `MessageDeduplicationId` = the event id, so it drops a relay's re-send
//! within its 5-minute window) and the consumer side ([`inbox_consumer`]:
//! long polling, each message through the inbox, deleted only after the
//! inbox commit, its visibility extended while the handler runs).
//!
//! Credentials come from the standard AWS chain (environment, profile, SSO,
//! web identity, container and instance roles) and are never logged.
#![warn(missing_docs)]

mod client;
#[cfg(feature = "sink")]
mod config;
mod consumer;
#[cfg(feature = "sink")]
mod sink;

pub use client::sdk_config;
#[cfg(feature = "sink")]
pub use config::{SnsConfig, SqsConfig};
pub use consumer::{inbox_consumer, message, ConsumerOptions};
/// The inbox loop this crate's consumer wraps, with its handler and retry
/// types: a consumer needs no other postbox crate.
pub use postbox::prelude::*;
#[cfg(feature = "sink")]
pub use sink::{SnsSink, SqsSink};

/// Re-export of the AWS configuration loader [`sdk_config`] builds on.
pub use aws_config;
#[cfg(feature = "sink")]
/// Re-export of the SNS client the SNS sink runs on.
pub use aws_sdk_sns;
/// Re-export of the SQS client the sink and consumer run on.
pub use aws_sdk_sqs;

/// Message attribute: the event name.
pub use postbox::wire::EVENT as ATTR_EVENT;
/// Message attribute: the outbox event id (the inbox's message id).
pub use postbox::wire::EVENT_ID as ATTR_EVENT_ID;
/// Message attribute: the row's headers (`traceparent`, …) as one JSON
/// object of strings (absent when there are none; SQS allows 10 attributes).
pub use postbox::wire::HEADERS as ATTR_HEADERS;
/// Message attribute: the event's ordering key (absent without one).
pub use postbox::wire::KEY as ATTR_KEY;
/// The largest message SQS and SNS take.
pub const MAX_MESSAGE_BYTES: usize = 256 * 1024;
