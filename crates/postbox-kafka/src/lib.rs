//! Kafka for postbox: the relay's sink ([`KafkaSink`], an idempotent producer
//! whose delivery reports decide what is marked sent) and the consumer side
//! ([`inbox_consumer`], offsets committed only after the inbox transaction).
#![warn(missing_docs)]

//! The sink needs the `sink` feature (on by default); a service that only
//! consumes turns default features off and does not compile the relay.

#[cfg(feature = "sink")]
mod config;
mod consumer;
#[cfg(feature = "sink")]
mod encoding;
#[cfg(feature = "sink")]
mod sink;
#[cfg(feature = "sink")]
mod topics;
#[cfg(feature = "sink")]
mod transactions;

#[cfg(feature = "sink")]
pub use config::{KafkaConfig, PublishMode, ValueFormat};
pub use consumer::{consumer_config, inbox_consumer, message, message_id, trace_context};
/// The inbox loop this crate's consumer wraps, with its handler and retry
/// types: a consumer needs no other postbox crate.
pub use postbox::prelude::*;
#[cfg(feature = "sink")]
pub use {encoding::Outgoing, sink::KafkaSink};

/// Re-export of the pinned `rdkafka` crate.
pub use rdkafka;

/// Header carrying the event type.
pub use postbox::wire::EVENT as HEADER_EVENT;
/// Header carrying the outbox event id (the inbox key on the consumer side).
pub use postbox::wire::EVENT_ID as HEADER_EVENT_ID;
