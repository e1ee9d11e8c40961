//! BullMQ for postbox: the relay's sink ([`BullmqSink`]) and the consumer's
//! inbox-wrapped worker ([`inbox_worker`]).
//!
//! Both sit on the BullMQ maintainers' own Rust crate (`bullmq-official`),
//! which runs BullMQ's Lua scripts, so jobs are the ones Node `queue.add`
//! would create and Node `Worker`s process them.

mod config;
mod sink;
mod worker;

pub use config::{BullmqConfig, PayloadPolicy, PublishMode};
pub use sink::BullmqSink;
pub use worker::{inbox_worker, trace_context, InboxHandler, InboxOutcome};

/// Default job-data field carrying the event's trace context (see
/// [`BullmqConfig::trace_field`]).
pub const TRACE_FIELD: &str = "_trace";

/// Re-export of the pinned `bullmq` crate, so users need not pin it twice.
pub use bullmq;
