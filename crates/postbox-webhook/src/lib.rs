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
/// The inbox loop the receiver wraps, re-exported: a receiving service needs
/// no other postbox crate.
pub use postbox::{
    handler_fn, BoxError, CancellationToken, ConsumeError, Handler, Inbox, InboxConsumer, Message,
    Processed, RetryPolicy,
};
pub use receive::{receive, Received, Verifier, VerifyError};
pub use signature::{KeyError, SigningKey};
#[cfg(feature = "sink")]
pub use sink::WebhookSink;

/// Standard Webhooks: the message id (the outbox event id).
pub const HEADER_ID: &str = "webhook-id";
/// Standard Webhooks: when the request was signed, Unix seconds.
pub const HEADER_TIMESTAMP: &str = "webhook-timestamp";
/// Standard Webhooks: space-separated `v1,<base64 HMAC-SHA256>`, one per key.
pub const HEADER_SIGNATURE: &str = "webhook-signature";
/// The event name.
pub const HEADER_EVENT: &str = "postbox-event";
/// The event's topic.
pub const HEADER_TOPIC: &str = "postbox-topic";
/// The event's ordering key (absent without one).
pub const HEADER_KEY: &str = "postbox-key";
