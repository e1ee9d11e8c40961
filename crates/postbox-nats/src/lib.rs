//! NATS JetStream for postbox: the relay's sink ([`NatsSink`]: each event
//! published with `Nats-Msg-Id` = its event id, so the stream's duplicate
//! window drops a relay's re-send, and marked sent only after the stream's
//! PubAck) and the consumer side ([`inbox_consumer`]: a durable pull
//! consumer, explicit ack only after the inbox transaction).
//!
//! The sink needs the `sink` feature (on by default); a service that only
//! consumes turns default features off and does not compile the relay.
#![warn(missing_docs)]

#[cfg(feature = "sink")]
mod config;
mod consumer;
#[cfg(feature = "sink")]
mod sink;

#[cfg(feature = "sink")]
pub use config::NatsConfig;
pub use consumer::{consumer_config, inbox_consumer, message};
/// The inbox loop this crate's consumer wraps, with its handler and retry
/// types: a consumer needs no other postbox crate.
pub use postbox::prelude::*;
#[cfg(feature = "sink")]
pub use sink::NatsSink;

/// Re-export of the `async-nats` crate the sink and consumer run on.
pub use async_nats;

/// Header carrying the event name.
pub use postbox::wire::EVENT as HEADER_EVENT;
/// Header carrying the event's ordering key.
pub use postbox::wire::KEY as HEADER_KEY;
