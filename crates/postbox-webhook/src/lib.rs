//! HTTP webhooks for postbox, by the Standard Webhooks specification
//! (<https://www.standardwebhooks.com>): the relay's sink ([`WebhookSink`]:
//! one POST per event, signed with HMAC-SHA256, a key's next event only after
//! the previous one got a 2xx) and the receiver side ([`Verifier`]: the
//! signature and timestamp check; [`receive`]: the inbox around the
//! receiving service's handler).
//!
//! The sink needs the `sink` feature (on by default); a service that only
//! receives turns default features off and does not compile the relay.
#![warn(missing_docs)]

#[cfg(feature = "sink")]
mod config;
mod receive;
mod signature;
#[cfg(feature = "sink")]
mod sink;

#[cfg(feature = "sink")]
pub use config::{BodyFormat, Redirects, WebhookConfig};
/// The inbox loop the receiver wraps, with its handler and retry types: a
/// receiving service needs no other postbox crate.
pub use postbox::prelude::*;
pub use receive::{receive, Received, Verifier, VerifyError, RECEIVE_DEADLINE};
pub use signature::{KeyError, SigningKey};
#[cfg(feature = "sink")]
pub use sink::WebhookSink;

/// The event name.
pub use postbox::wire::EVENT as HEADER_EVENT;
/// The event's ordering key (absent without one).
pub use postbox::wire::KEY as HEADER_KEY;
/// The event's topic.
pub use postbox::wire::TOPIC as HEADER_TOPIC;
/// Standard Webhooks: the message id (the outbox event id).
pub use postbox::wire::WEBHOOK_ID as HEADER_ID;
/// Standard Webhooks: space-separated `v1,<base64 HMAC-SHA256>`, one per key.
pub use postbox::wire::WEBHOOK_SIGNATURE as HEADER_SIGNATURE;
/// Standard Webhooks: when the request was signed, Unix seconds.
pub use postbox::wire::WEBHOOK_TIMESTAMP as HEADER_TIMESTAMP;
