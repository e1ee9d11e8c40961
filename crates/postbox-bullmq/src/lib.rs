//! BullMQ for postbox: the relay's sink ([`BullmqSink`]) and the consumer's
//! inbox-wrapped worker ([`inbox_worker`]).
//!
//! Both sit on the BullMQ maintainers' own Rust crate (`bullmq-official`),
//! which runs BullMQ's Lua scripts, so jobs are the ones Node `queue.add`
//! would create and Node `Worker`s process them.
#![warn(missing_docs)]

//! The sink needs the `sink` feature (on by default); a service that only
//! consumes turns default features off and does not compile the relay.

#[cfg(feature = "sink")]
mod config;
#[cfg(feature = "sink")]
mod sink;
mod stranded;
mod worker;

#[cfg(feature = "sink")]
pub use config::{BullmqConfig, PayloadPolicy, PublishMode};
/// The inbox loop this crate's consumer wraps, with its handler and retry
/// types: a consumer needs no other postbox crate.
pub use postbox::prelude::*;
#[cfg(feature = "sink")]
pub use sink::{BullmqSink, JobData};
pub use worker::{
    inbox_worker, message, trace_context, worker_options, InboxWorker, InboxWorkerError,
};

/// Default job-data field carrying the event's trace context (the sink's
/// `trace_field` setting).
pub const TRACE_FIELD: &str = "_trace";

/// Re-export of the pinned `bullmq` crate, so users need not pin it twice.
pub use bullmq;
/// The BullMQ types a consumer names.
pub use bullmq::{Job, WorkerOptions};
