//! The postbox relay: moves committed outbox rows to a broker, per-key ordered,
//! holding nothing unsent only in memory.
//!
//! Loop per worker (docs: architecture.md, concepts/read-path.md): wake (NOTIFY, logical decoding or poll) → claim a batch of the
//! partitions it owns, marked sent (or deleted) by the claim itself, uncommitted → publish through a
//! [`Destination`] (a [`Delivery`] keeping per-key order over one broker's [`Sink`], or a
//! [`Router`] over several) and await the broker's acknowledgement → COMMIT; or, when the broker
//! did not take everything, roll back and record each event's outcome. A crash at
//! any point leaves the rows in the outbox; the next owner republishes them and
//! the event id makes that idempotent.
#![warn(missing_docs)]

mod broker_watch;
pub mod cloudevents;
mod config;
mod delivery;
mod failpoint;
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing;
pub mod headers;
mod health;
mod maintenance;
mod partitions;
mod plan;
mod reconnecting;
mod relay;
mod router;
mod scheduled;
mod secret;
mod section;
mod session_check;
mod sink;
mod stats;
pub mod target;
mod wake;
mod wake_logical;
mod worker;

pub use config::{Config, ConfigError, SentRows};
pub use delivery::Delivery;
pub use partitions::target_share;
/// Re-exported: the one backoff schedule, defined in the library.
pub use postbox::Backoff;
pub use reconnecting::Reconnecting;
pub use relay::{NotReady, Readiness, Relay, RelayError};
pub use router::{RouteMatch, Router, TopicPattern};
pub use secret::Secret;
pub use section::{Alias, HumanDuration, Renamed, Section, SinkConfig};
pub use sink::{
    BoxError, Destination, Encoded, GroupOutcome, GroupPolicy, OutboxEvent, Outcome, Sink,
    SinkError,
};
pub use stats::{Stats, StatsSnapshot};
pub use target::{TargetError, Template};
