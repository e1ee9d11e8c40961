//! Redis Streams for postbox: the relay's sink ([`RedisStreamsSink`]: each
//! event appended with `XADD` to a stream named from its topic, a batch with
//! deep keys as one script, else a wave's entries pipelined and each answer
//! classified) and the consumer side
//! ([`inbox_consumer`]: a consumer group read with `XREADGROUP`, each entry
//! `XACK`ed only after the inbox transaction, stalled entries of dead
//! consumers taken over with `XAUTOCLAIM`).
//!
//! Redis Streams cannot de-duplicate: a relay killed after `XADD` and before
//! its `COMMIT` appends the event again. The entry carries the event id
//! (field `id`), and the inbox skips the second one.
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
pub use config::{PublishMode, RedisStreamsConfig};
pub use consumer::{inbox_consumer, message, ConsumerOptions};
/// The inbox loop this crate's consumer wraps, with its handler and retry
/// types: a consumer needs no other postbox crate.
pub use postbox::prelude::*;
#[cfg(feature = "sink")]
pub use sink::RedisStreamsSink;

/// Re-export of the `redis` crate the sink and consumer run on.
pub use redis;

/// Entry field: the event name.
pub use postbox::wire::FIELD_EVENT;
/// Entry field: the row's headers (`traceparent`, …) as one JSON object of
/// strings (absent when there are none).
pub use postbox::wire::FIELD_HEADERS;
/// Entry field: the outbox event id (the inbox's message id).
pub use postbox::wire::FIELD_ID;
/// Entry field: the event's ordering key (absent when it has none).
pub use postbox::wire::FIELD_KEY;
/// Entry field: the payload, JSON text.
pub use postbox::wire::FIELD_PAYLOAD;
