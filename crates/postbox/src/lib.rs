//! postbox: a transactional outbox and inbox for PostgreSQL.
//!
//! Producers write their business rows and an outbox [`Event`] in one sqlx
//! transaction ([`Outbox::enqueue`]); the `postbox relay` daemon moves committed
//! events to a broker; consumers de-duplicate with the [`inbox`] in the
//! transaction of their effect. Nothing here talks to a broker.
//!
//! ```no_run
//! # async fn demo(pool: sqlx::PgPool) -> Result<(), Box<dyn std::error::Error>> {
//! let outbox = postbox::Outbox::new("consumers")?;
//! let mut tx = pool.begin().await?;
//! // ... business writes on &mut *tx ...
//! outbox
//!     .enqueue(&mut *tx, postbox::Event::new("chat-messages", "message.created", serde_json::json!({"id": 1})).key("chat:7"))
//!     .await?;
//! tx.commit().await?;
//! # Ok(()) }
//! ```
#![warn(missing_docs)]

mod backoff;
pub mod cloudevents;
pub mod consume;
mod error;
mod ident;
pub mod inbox;
mod message;
pub mod migrate;
mod outbox;
pub mod roles;
pub mod servers;
/// The SQL of every query, rendered for a schema. Internal: shared with
/// `postbox-relay`, not part of the API (no semver promise).
#[doc(hidden)]
pub mod sql;
pub mod trace;
pub mod wire;

pub use backoff::Backoff;
pub use consume::{
    handler_fn, BoxError, ConsumeError, FnHandler, Handler, HandlerFuture, InboxConsumer,
    Permanent, Processed, RetryPolicy,
};
pub use error::{
    EnqueueError, Error, InboxError, InvalidEvent, InvalidIdentifier, MigrateError, UnknownChoice,
};
pub use ident::{RoleName, SchemaName};
pub use inbox::{Inbox, Receipt};
pub use message::Message;
pub use outbox::{enqueue, enqueue_many, Enqueued, Event, Outbox, DEFAULT_MAX_DELAY};
pub use servers::{Servers, ServersError};
pub use sql::Statements;
/// The shutdown token every consumer loop takes.
pub use tokio_util::sync::CancellationToken;
pub use trace::{InvalidTraceparent, TraceContext};

/// What a consuming service names, in one `use`: the inbox loop, its handler,
/// retry and error types, and the shutdown token. Every broker crate
/// re-exports it, so a consumer depends on its broker's crate alone.
pub mod prelude {
    pub use crate::{
        handler_fn, BoxError, CancellationToken, ConsumeError, Handler, Inbox, InboxConsumer,
        Message, Permanent, Processed, RetryPolicy,
    };
}

/// The `sqlx` this postbox is built on: name its types (`PgConnection`,
/// `PgPool`) through here, or depend on the same minor version (0.8).
pub use sqlx;

/// Schema used by the free functions [`enqueue`], [`enqueue_many`] and
/// [`inbox::receive`] when the caller does not name one.
pub const DEFAULT_SCHEMA: &str = "postbox";

/// Number of ordering partitions of every outbox (fixed by migration 0001).
pub const PARTITIONS: i16 = 64;

/// Channel the outbox trigger notifies, with the schema name as payload.
pub const NOTIFY_CHANNEL: &str = "postbox_outbox";

/// A duration as log lines show it: whole milliseconds below a second
/// (`520ms`), tenths of seconds below a minute (`1.5s`), then minutes and
/// seconds (`2m5s`); not the debug form (`519.7697988ms`).
#[doc(hidden)]
pub fn display_duration(d: std::time::Duration) -> impl std::fmt::Display {
    struct Shown(u128);
    impl std::fmt::Display for Shown {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            match self.0 {
                ms @ 0..=999 => write!(f, "{ms}ms"),
                ms @ 1000..=59_999 => write!(f, "{:.1}s", ms as f64 / 1000.0),
                ms => write!(f, "{}m{}s", ms / 60_000, ms % 60_000 / 1000),
            }
        }
    }
    Shown(d.as_millis())
}

#[cfg(test)]
mod display_duration_tests {
    use std::time::Duration;

    #[test]
    fn durations_show_rounded() {
        let show =
            |ms: f64| super::display_duration(Duration::from_secs_f64(ms / 1000.0)).to_string();
        assert_eq!(show(519.7697988), "519ms");
        assert_eq!(show(1520.0), "1.5s");
        assert_eq!(show(125_000.0), "2m5s");
    }
}
