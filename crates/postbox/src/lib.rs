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

pub use consume::{
    handler_fn, BoxError, ConsumeError, FnHandler, Handler, HandlerFuture, InboxConsumer,
    Processed, RetryPolicy,
};
pub use error::{
    EnqueueError, Error, InboxError, InvalidEvent, InvalidIdentifier, MigrateError, UnknownChoice,
};
pub use ident::{RoleName, SchemaName};
pub use inbox::{Inbox, Receipt};
pub use message::Message;
pub use outbox::{enqueue, enqueue_many, Enqueued, Event, Outbox};
pub use servers::{Servers, ServersError};
/// The shutdown token every consumer loop takes.
pub use tokio_util::sync::CancellationToken;
pub use trace::{InvalidTraceparent, TraceContext};

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
