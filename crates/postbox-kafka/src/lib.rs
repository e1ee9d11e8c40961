//! Kafka for postbox: the relay's sink ([`KafkaSink`], an idempotent producer
//! whose delivery reports decide what is marked sent) and the consumer side
//! ([`inbox_consumer`], offsets committed only after the inbox transaction).

mod config;
mod consumer;
mod sink;

pub use config::{KafkaConfig, ValueFormat};
pub use consumer::{consumer_config, inbox_consumer, message_id, trace_context, KafkaHandler};
pub use sink::KafkaSink;

/// Re-export of the pinned `rdkafka` crate.
pub use rdkafka;

/// Header carrying the outbox event id (the inbox key on the consumer side).
pub const HEADER_EVENT_ID: &str = "postbox-event-id";
/// Header carrying the event type.
pub const HEADER_EVENT: &str = "postbox-event";
