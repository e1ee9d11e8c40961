//! The one inbox loop every consumer wraps (BullMQ worker, Kafka consumer,
//! and each later broker): run a message's effect in the transaction that
//! records it in the inbox, retry what the database may heal, settle a COMMIT
//! whose outcome was lost, retry a failing handler by the consumer's
//! [`RetryPolicy`] and then keep the message as a dead letter, run the dead
//! letters an operator asked to replay, and say when the broker may be
//! acknowledged.
//!
//! A wrapper maps only its broker's side: turning a delivery into a
//! [`Message`], and the acknowledgement, which it sends only after
//! [`InboxConsumer::process`] returned `Ok`.

pub(crate) mod classify;
mod dead_letter;
mod handler;
mod permanent;
mod report;
mod retry;

use crate::{inbox::Inbox, InboxError, Message, Receipt};
use classify::AttemptError;
use sqlx::PgPool;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

pub use handler::{handler_fn, BoxError, FnHandler, Handler, HandlerFuture};
pub use permanent::Permanent;
pub use retry::RetryPolicy;

/// What [`InboxConsumer::process`] did with a message. In every case the
/// broker may now be acknowledged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Processed {
    /// First delivery: the effect is committed.
    Fresh,
    /// Already recorded by a committed transaction: the effect was skipped.
    Duplicate,
    /// The handler failed on every attempt of the retry policy: the message
    /// is kept in the inbox's dead letters, for an operator to replay.
    DeadLettered,
}

/// Why a message is neither committed nor kept as a dead letter. Do not
/// acknowledge it: a later delivery will try again.
#[derive(Debug, thiserror::Error)]
pub enum ConsumeError {
    /// The database stayed unreachable longer than the consumer's patience.
    #[error("database unavailable for {waited:?}: {source}")]
    Database {
        /// How long it was retried.
        waited: Duration,
        /// The last error.
        #[source]
        source: sqlx::Error,
    },
    /// Shutdown began before the message's effect was committed.
    #[error("shutting down before the message's effect was committed")]
    Cancelled,
    /// The message failed and could not be kept as a dead letter, for a
    /// reason the database will not heal by itself.
    #[error("message {message_id} failed and cannot be kept as a dead letter: {source}. Run `postbox migrate` on the inbox's schema (and `postbox grant --as consumer` for a consumer role)")]
    DeadLetter {
        /// The message.
        message_id: String,
        /// The database's refusal.
        #[source]
        source: sqlx::Error,
    },
}

impl ConsumeError {
    /// Whether a later delivery of the same message may succeed without
    /// anyone changing anything.
    pub fn is_transient(&self) -> bool {
        !matches!(self, ConsumeError::DeadLetter { .. })
    }
}

/// The inbox loop of one consumer name on one schema's inbox.
#[derive(Debug, Clone)]
pub struct InboxConsumer {
    pool: PgPool,
    inbox: Inbox,
    name: Arc<str>,
    patience: Option<Duration>,
    retry: RetryPolicy,
    replay_poll: Duration,
    /// How long one delivery may take in all before a failing message is
    /// kept as a dead letter ([`deadline`](InboxConsumer::deadline)).
    deadline: Option<Duration>,
}

impl InboxConsumer {
    /// `name` records its messages in `inbox` through `pool`, with the default
    /// [`RetryPolicy`]. The database is retried for as long as it takes (see
    /// [`patience`](InboxConsumer::patience)).
    pub fn new(pool: PgPool, inbox: Inbox, name: &str) -> Self {
        InboxConsumer {
            pool,
            inbox,
            name: name.into(),
            patience: None,
            retry: RetryPolicy::default(),
            replay_poll: Duration::from_secs(2),
            deadline: None,
        }
    }

    /// End each delivery of a failing message within `limit`: a retry whose
    /// wait would end past it is not waited for, and the message is kept as
    /// a dead letter at once (acknowledge it then). For a sender that stops
    /// waiting for the answer and sends again (a webhook's timeout): a
    /// handler still retrying then would start over at every delivery, and
    /// its key would never move on. The handler's own run is not cut short.
    pub fn deadline(mut self, limit: Duration) -> Self {
        self.deadline = Some(limit);
        self
    }

    /// The [`deadline`](InboxConsumer::deadline) set, if any.
    pub fn delivery_deadline(&self) -> Option<Duration> {
        self.deadline
    }

    /// Give up on a database outage after `limit` with
    /// [`ConsumeError::Database`] (for brokers that redeliver an
    /// unacknowledged message on their own).
    pub fn patience(mut self, limit: Duration) -> Self {
        self.patience = Some(limit);
        self
    }

    /// How often a failing handler runs, and the waits in between, before the
    /// message becomes a dead letter.
    pub fn retry(mut self, policy: RetryPolicy) -> Self {
        self.retry = policy;
        self
    }

    /// How often [`serve_replays`](InboxConsumer::serve_replays) looks for
    /// dead letters an operator asked to replay (default 2 s).
    pub fn replay_poll(mut self, every: Duration) -> Self {
        self.replay_poll = every;
        self
    }

    /// Refuse to start on a schema the consumer cannot use
    /// ([`Inbox::check`]): not migrated, outdated, or not readable by the
    /// role. Every broker's inbox consumer calls it before taking a message.
    pub async fn check(&self) -> Result<(), InboxError> {
        let mut conn = self.pool.acquire().await.map_err(InboxError::Database)?;
        self.inbox.check(&mut conn).await
    }

    /// The consumer name messages are recorded under.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Run `msg`'s effect exactly once. `Ok` means committed, already done, or
    /// kept as a dead letter after the retry policy: acknowledge the broker
    /// now. Database failures that may heal are retried with backoff until
    /// the patience runs out or `shutdown` is cancelled.
    pub async fn process<H: Handler>(
        &self,
        msg: &Message,
        handler: &H,
        shutdown: &CancellationToken,
    ) -> Result<Processed, ConsumeError> {
        self.process_within(msg, handler, shutdown, self.deadline)
            .await
    }

    /// [`process`](InboxConsumer::process) with `deadline` in place of the
    /// consumer's own ([`deadline`](InboxConsumer::deadline)).
    pub async fn process_within<H: Handler>(
        &self,
        msg: &Message,
        handler: &H,
        shutdown: &CancellationToken,
        deadline: Option<Duration>,
    ) -> Result<Processed, ConsumeError> {
        let attempts = self.retry.attempts.max(1);
        let started = std::time::Instant::now();
        let mut failures = 0;
        let mut first_failure: Option<std::time::Instant> = None;
        loop {
            let (error, permanent) = match self.transaction(msg, handler, shutdown).await? {
                Ok(done) => return Ok(done),
                Err(e) => (report::chain(&*e), Permanent::is(&e)),
            };
            failures += 1;
            let failing_for = first_failure
                .get_or_insert_with(std::time::Instant::now)
                .elapsed();
            metrics::counter!("postbox_inbox_handler_failures_total", "consumer" => self.name.to_string()).increment(1);
            let wait = self.retry.delay(failures);
            let out_of_time = deadline.is_some_and(|d| started.elapsed() + wait >= d);
            if failures >= attempts || permanent || out_of_time {
                self.keep_dead_letter(msg, failures, &error, failing_for, shutdown)
                    .await?;
                metrics::counter!("postbox_inbox_dead_letters_total", "consumer" => self.name.to_string()).increment(1);
                report::dead_lettered(&self.name, msg, failures, &error);
                return Ok(Processed::DeadLettered);
            }
            report::handler_failed(&self.name, msg, failures, attempts, &error, wait);
            tokio::select! {
                _ = shutdown.cancelled() => return Err(ConsumeError::Cancelled),
                _ = tokio::time::sleep(wait) => {}
            }
        }
    }

    /// [`process`](InboxConsumer::process) for brokers whose wrapper holds the
    /// message in hand (Kafka, RabbitMQ, NATS): what does not settle it —
    /// the database past the patience, a dead letter that cannot be written —
    /// is retried in place with backoff, so no later message overtakes it.
    /// `None`: shutdown began first; do not acknowledge.
    pub async fn process_in_place<H: Handler>(
        &self,
        msg: &Message,
        handler: &H,
        shutdown: &CancellationToken,
    ) -> Option<Processed> {
        // Every log line about this message carries its id and trace parent.
        let span = tracing::info_span!(
            "message",
            message_id = %msg.id,
            traceparent = msg.trace_context().map(|t| t.traceparent)
        );
        let mut failures = 0;
        loop {
            match self
                .process(msg, handler, shutdown)
                .instrument(span.clone())
                .await
            {
                Ok(done) => return Some(done),
                Err(ConsumeError::Cancelled) => return None,
                Err(e) => {
                    let delay = IN_PLACE.delay(failures);
                    failures += 1;
                    tracing::warn!(error = %e, source = %msg.source, retry_in = %crate::display_duration(delay), "message not processed; retrying it in place");
                    tokio::select! {
                        _ = shutdown.cancelled() => return None,
                        _ = tokio::time::sleep(delay) => {}
                    }
                }
            }
        }
    }

    /// Run the dead letters an operator asked to replay (`postbox inbox-dlq
    /// replay`) through `handler`, one transaction each, until `shutdown`.
    /// Every consumer wrapper runs this beside its receive loop; instances of
    /// one consumer name share the work.
    pub async fn serve_replays<H: Handler>(&self, handler: &H, shutdown: &CancellationToken) {
        loop {
            match self.replay_one(handler).await {
                Ok(true) if !shutdown.is_cancelled() => continue,
                Ok(_) => {}
                Err(e) => report::database_unavailable(
                    &self.name,
                    "replaying dead letters",
                    &e.to_string(),
                    self.replay_poll,
                ),
            }
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tokio::time::sleep(self.replay_poll) => {}
            }
        }
    }

    /// One run of the handler in the inbox transaction, the database retried
    /// while it may heal. The inner `Err` is the handler's failure.
    async fn transaction<H: Handler>(
        &self,
        msg: &Message,
        handler: &H,
        shutdown: &CancellationToken,
    ) -> Result<Result<Processed, BoxError>, ConsumeError> {
        let mut outage = Outage::default();
        // Set when a COMMIT failed without an answer: it may have gone through.
        let mut commit_in_doubt = false;
        loop {
            match self.attempt(msg, handler, &mut commit_in_doubt).await {
                Ok(done) => return Ok(Ok(done)),
                Err(AttemptError::Handler(e)) => return Ok(Err(e)),
                Err(AttemptError::Database(e)) => {
                    self.wait_out(&mut outage, e, "the message's transaction", shutdown)
                        .await?
                }
            }
        }
    }

    async fn keep_dead_letter(
        &self,
        msg: &Message,
        attempts: u32,
        error: &str,
        failing_for: Duration,
        shutdown: &CancellationToken,
    ) -> Result<(), ConsumeError> {
        let mut outage = Outage::default();
        loop {
            match self
                .record_dead_letter(msg, attempts, error, failing_for)
                .await
            {
                Ok(()) => return Ok(()),
                Err(e) if classify::is_transient(&e) => {
                    self.wait_out(&mut outage, e, "keeping a dead letter", shutdown)
                        .await?
                }
                Err(source) => {
                    return Err(ConsumeError::DeadLetter {
                        message_id: msg.id.clone(),
                        source,
                    })
                }
            }
        }
    }

    /// Wait before retrying the database, unless the patience ran out or
    /// shutdown began.
    async fn wait_out(
        &self,
        outage: &mut Outage,
        e: sqlx::Error,
        what: &str,
        shutdown: &CancellationToken,
    ) -> Result<(), ConsumeError> {
        let started = *outage.started.get_or_insert_with(Instant::now);
        let waited = started.elapsed();
        if self.patience.is_some_and(|p| waited >= p) {
            return Err(ConsumeError::Database { waited, source: e });
        }
        let delay = IN_PLACE.delay(outage.failures);
        outage.failures += 1;
        report::database_unavailable(&self.name, what, &e.to_string(), delay);
        tokio::select! {
            _ = shutdown.cancelled() => return Err(ConsumeError::Cancelled),
            _ = tokio::time::sleep(delay) => {}
        }
        Ok(())
    }

    async fn attempt<H: Handler>(
        &self,
        msg: &Message,
        handler: &H,
        commit_in_doubt: &mut bool,
    ) -> Result<Processed, AttemptError> {
        let mut tx = self.pool.begin().await.map_err(AttemptError::classify)?;
        match self.inbox.receive(&mut tx, &self.name, &msg.id).await? {
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
                tracing::info!(message_id = %msg.id, consumer = %self.name, "duplicate delivery skipped by the inbox");
                handler.on_duplicate(msg).await;
                Ok(Processed::Duplicate)
            }
        }
    }
}

/// How a message is retried in place, and a database outage waited out:
/// 100 ms, doubling up to 5 s.
const IN_PLACE: crate::Backoff = crate::Backoff {
    min: Duration::from_millis(100),
    max: Duration::from_secs(5),
};

/// A database outage being waited out: since when, and how many tries failed.
#[derive(Default)]
struct Outage {
    started: Option<Instant>,
    /// Failed tries so far, for [`IN_PLACE`].
    failures: u32,
}
