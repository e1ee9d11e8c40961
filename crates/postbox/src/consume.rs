//! The one inbox loop every consumer wraps (BullMQ worker, Kafka consumer,
//! and each later broker): run a message's effect in the transaction that
//! records it in the inbox, retry what the database may heal, settle a COMMIT
//! whose outcome was lost, and say when the broker may be acknowledged.
//!
//! A wrapper maps only its broker's side: the message id, what to do with a
//! handler failure (BullMQ fails the job; Kafka retries the message before any
//! later one of its partition), and the acknowledgement, which it sends only
//! after [`InboxConsumer::process`] returned `Ok`.

use crate::{inbox::Inbox, Error, Receipt};
use sqlx::{PgConnection, PgPool};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

/// A boxed error source, as handlers return them.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// The effect of a message of type `M`, run in the inbox transaction.
#[async_trait::async_trait]
pub trait Handler<M: Sync + ?Sized>: Send + Sync + 'static {
    /// Perform the message's effect on `tx` (the inbox transaction). An error
    /// rolls everything back. A database error the server may heal
    /// (connection lost, serialization failure) is retried here; any other
    /// goes back to the broker wrapper, whose policy applies.
    async fn handle(&self, tx: &mut PgConnection, msg: &M) -> Result<(), BoxError>;

    /// After the transaction committed, before the broker is acknowledged: the
    /// place for side effects outside the database (push to a socket).
    async fn after_commit(&self, _msg: &M) {}

    /// The message was already in the inbox; its effect was skipped.
    async fn on_duplicate(&self, _msg: &M) {}
}

/// What [`InboxConsumer::process`] did with a message. Either way the broker may
/// now be acknowledged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Processed {
    /// First delivery: the effect is committed.
    Fresh,
    /// Already recorded by a committed transaction: the effect was skipped.
    Duplicate,
}

/// Why a message's effect is not committed. Do not acknowledge it.
#[derive(Debug, thiserror::Error)]
pub enum ConsumeError {
    /// The handler failed (or the data it read did): rolled back. Whether to
    /// retry is the broker wrapper's policy.
    #[error("handler failed: {0}")]
    Handler(#[source] BoxError),
    /// The database stayed unreachable longer than the consumer's patience.
    /// Transient: deliver the message again later.
    #[error("database unavailable for {waited:?}: {source}")]
    Database {
        /// How long it was retried.
        waited: Duration,
        /// The last error.
        #[source]
        source: sqlx::Error,
    },
    /// Shutdown began while the database was being retried: the message goes
    /// back to the broker unacknowledged.
    #[error("shutting down before the message's effect was committed")]
    Cancelled,
}

impl ConsumeError {
    /// Whether a later delivery of the same message may succeed without
    /// anyone changing anything.
    pub fn is_transient(&self) -> bool {
        !matches!(self, ConsumeError::Handler(_))
    }
}

/// The inbox loop of one consumer name on one schema's inbox.
#[derive(Debug, Clone)]
pub struct InboxConsumer {
    pool: PgPool,
    inbox: Inbox,
    name: Arc<str>,
    patience: Option<Duration>,
}

impl InboxConsumer {
    /// `name` records its messages in `inbox` through `pool`. The database is
    /// retried for as long as it takes (see [`patience`](InboxConsumer::patience)).
    pub fn new(pool: PgPool, inbox: Inbox, name: &str) -> Self {
        InboxConsumer {
            pool,
            inbox,
            name: name.into(),
            patience: None,
        }
    }

    /// Give up on a database outage after `limit` with
    /// [`ConsumeError::Database`] (for brokers that redeliver an
    /// unacknowledged message on their own, like BullMQ's stalled jobs).
    pub fn patience(mut self, limit: Duration) -> Self {
        self.patience = Some(limit);
        self
    }

    /// The consumer name messages are recorded under.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Run `msg`'s effect exactly once. `Ok` means committed (or already done):
    /// acknowledge the broker now. Database failures that may heal are retried
    /// with backoff until the patience runs out or `shutdown` is cancelled.
    pub async fn process<M, H>(
        &self,
        message_id: &str,
        msg: &M,
        handler: &H,
        shutdown: &CancellationToken,
    ) -> Result<Processed, ConsumeError>
    where
        M: Sync + ?Sized,
        H: Handler<M> + ?Sized,
    {
        let started = Instant::now();
        let mut delay = Duration::from_millis(100);
        // Set when a COMMIT failed without an answer: it may have gone through.
        let mut commit_in_doubt = false;
        loop {
            let e = match self
                .attempt(message_id, msg, handler, &mut commit_in_doubt)
                .await
            {
                Ok(done) => return Ok(done),
                Err(AttemptError::Handler(e)) => return Err(ConsumeError::Handler(e)),
                Err(AttemptError::Database(e)) => e,
            };
            let waited = started.elapsed();
            if self.patience.is_some_and(|p| waited >= p) {
                return Err(ConsumeError::Database { waited, source: e });
            }
            tracing::warn!(message_id, consumer = %self.name, error = %e, retry_in = ?delay, "database unavailable; retrying the message's transaction");
            tokio::select! {
                _ = shutdown.cancelled() => return Err(ConsumeError::Cancelled),
                _ = tokio::time::sleep(delay) => {}
            }
            delay = (delay * 2).min(Duration::from_secs(5));
        }
    }

    async fn attempt<M, H>(
        &self,
        id: &str,
        msg: &M,
        handler: &H,
        commit_in_doubt: &mut bool,
    ) -> Result<Processed, AttemptError>
    where
        M: Sync + ?Sized,
        H: Handler<M> + ?Sized,
    {
        let mut tx = self.pool.begin().await.map_err(AttemptError::classify)?;
        match self.inbox.receive(&mut tx, &self.name, id).await? {
            Receipt::Fresh => {
                handler
                    .handle(&mut tx, msg)
                    .await
                    .map_err(AttemptError::from_handler)?;
                if let Err(e) = tx.commit().await {
                    *commit_in_doubt = true;
                    return Err(AttemptError::classify(e));
                }
                handler.after_commit(msg).await;
                Ok(Processed::Fresh)
            }
            Receipt::Duplicate => {
                let _ = tx.rollback().await;
                if *commit_in_doubt {
                    // Our own earlier COMMIT went through after all: finish its work.
                    handler.after_commit(msg).await;
                    return Ok(Processed::Fresh);
                }
                tracing::info!(message_id = id, consumer = %self.name, "duplicate delivery skipped by the inbox");
                handler.on_duplicate(msg).await;
                Ok(Processed::Duplicate)
            }
        }
    }
}

/// One attempt's failure: whether trying the transaction again can help.
enum AttemptError {
    /// The database was unreachable, the session died, or the transaction
    /// lost a serialization race: retry.
    Database(sqlx::Error),
    /// The handler (or the data) failed.
    Handler(BoxError),
}

impl AttemptError {
    /// SQLSTATE classes 08 (connection), 53 (disk full, out of memory, too
    /// many connections), 57P01-03 (shutdown, cannot connect now),
    /// 40001/40P01 (serialization, deadlock), 25006 (the server is read-only:
    /// a standby, or `default_transaction_read_only` during maintenance), and
    /// the driver's own connection errors are transient: the database, not
    /// the message, is at fault. The rest is the handler's.
    fn classify(e: sqlx::Error) -> AttemptError {
        let transient = match &e {
            sqlx::Error::Io(_)
            | sqlx::Error::PoolTimedOut
            | sqlx::Error::PoolClosed
            | sqlx::Error::Protocol(_)
            | sqlx::Error::WorkerCrashed => true,
            sqlx::Error::Database(db) => db.code().is_some_and(|c| {
                c.starts_with("08")
                    || c.starts_with("53")
                    || matches!(
                        c.as_ref(),
                        "57P01" | "57P02" | "57P03" | "40001" | "40P01" | "25006"
                    )
            }),
            _ => false,
        };
        if transient {
            AttemptError::Database(e)
        } else {
            AttemptError::Handler(e.into())
        }
    }

    /// A handler's error: a database error inside it is classified as one.
    fn from_handler(e: BoxError) -> AttemptError {
        match e.downcast::<sqlx::Error>() {
            Ok(db) => AttemptError::classify(*db),
            Err(other) => match other.downcast::<Error>() {
                Ok(pe) => AttemptError::from(*pe),
                Err(other) => AttemptError::Handler(other),
            },
        }
    }
}

impl From<Error> for AttemptError {
    fn from(e: Error) -> Self {
        match e {
            Error::Database(e) => AttemptError::classify(e),
            other => AttemptError::Handler(other.into()),
        }
    }
}
