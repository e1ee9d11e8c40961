//! RabbitMQ for postbox: the relay's sink ([`RabbitmqSink`]: publisher
//! confirms, `mandatory`, persistent messages; a row is marked sent only after
//! the broker confirmed it and routed it to a queue) and the consumer side
//! ([`inbox_consumer`]: manual acks sent only after the inbox transaction).
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
pub use config::{RabbitmqConfig, RoutingKey, TopicRoute};
pub use consumer::{declare, inbox_consumer, message, ConsumerOptions};
/// The inbox loop this crate's consumer wraps, with its handler and retry
/// types: a consumer needs no other postbox crate.
pub use postbox::prelude::*;
#[cfg(feature = "sink")]
pub use sink::RabbitmqSink;

/// Re-export of the `lapin` crate the sink and consumer run on.
pub use lapin;
