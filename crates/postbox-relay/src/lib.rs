//! The postbox relay: moves committed outbox rows to a broker, per-key ordered,
//! holding nothing unsent only in memory.
//!
//! Loop per worker (DESIGN.md §4): wake (NOTIFY, logical decoding or poll) → claim a batch of the
//! partitions it owns (`FOR UPDATE`) → publish through a [`Sink`] and await the
//! broker's acknowledgement → mark sent / record failures → COMMIT. A crash at
//! any point leaves the rows in the outbox; the next owner republishes them and
//! the event id makes that idempotent.

mod backoff;
mod config;
mod maintenance;
mod ordering;
mod partitions;
mod relay;
mod router;
mod sink;
mod stats;
mod wake;
mod wake_logical;
mod worker;

pub use backoff::Backoff;
pub use config::{Config, ConfigError, Secret, SentRows};
pub use ordering::waves;
pub use partitions::target_share;
pub use relay::{Readiness, Relay, RelayError};
pub use router::{RouteMatch, Router, TopicPattern};
pub use sink::{BoxError, Delivery, OutboxEvent, Sink, SinkError};
pub use stats::{Stats, StatsSnapshot};
