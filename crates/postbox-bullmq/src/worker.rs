//! Consumers: a `bullmq` Worker whose handler runs inside the inbox
//! transaction, and whose job completes only after that transaction commits.
//!
//! A job delivered twice (worker died before completing it, so BullMQ moved it
//! back from stalled; or the relay republished it) finds its id in the inbox
//! and is completed without running the effect again.

use bullmq::worker::CancellationToken as JobToken;
use bullmq::{Job, Worker, WorkerOptions};
use postbox::{Inbox, Receipt};
use sqlx::{PgConnection, PgPool};
use std::sync::Arc;

/// The effect of a job, run in the inbox transaction.
#[async_trait::async_trait]
pub trait InboxHandler: Send + Sync + 'static {
    /// Perform the job's effect on `tx` (part of the inbox transaction). An
    /// error rolls everything back and fails the job (BullMQ retries it per
    /// its `attempts`).
    async fn handle(&self, tx: &mut PgConnection, job: &Job)
        -> Result<(), postbox_relay::BoxError>;

    /// Called after the transaction committed, before the job completes: the
    /// place for side effects outside the database (push to a socket).
    async fn after_commit(&self, _job: &Job) {}

    /// Called when the job was already in the inbox and its effect skipped.
    async fn on_duplicate(&self, _job: &Job) {}
}

/// What the wrapper did with a job (also the job's return value).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InboxOutcome {
    /// First delivery: effect committed.
    Processed,
    /// Already processed: skipped.
    Duplicate,
}

/// Start a BullMQ worker on `queue` whose jobs go through `inbox` as `consumer`
/// before `handler` sees them. The message id is the job id, which the relay
/// sets to the outbox event id. Close it with `worker.close(ms)`.
pub async fn inbox_worker<H: InboxHandler>(
    pool: PgPool,
    inbox: Inbox,
    consumer: &str,
    queue: &str,
    handler: Arc<H>,
    opts: WorkerOptions,
) -> Result<Worker, bullmq::Error> {
    let consumer: Arc<str> = consumer.into();
    let processor = move |job: Job, _token: JobToken| {
        let (pool, inbox, consumer, handler) = (
            pool.clone(),
            inbox.clone(),
            consumer.clone(),
            handler.clone(),
        );
        async move {
            let outcome = process(&pool, &inbox, &consumer, &*handler, &job)
                .await
                .map_err(|e| bullmq::Error::ProcessingError(e.to_string()))?;
            Ok(serde_json::json!({ "inbox": match outcome {
                InboxOutcome::Processed => "processed",
                InboxOutcome::Duplicate => "duplicate",
            }}))
        }
    };
    Worker::with_options(queue, processor, opts).await
}

async fn process<H: InboxHandler>(
    pool: &PgPool,
    inbox: &Inbox,
    consumer: &str,
    handler: &H,
    job: &Job,
) -> Result<InboxOutcome, postbox_relay::BoxError> {
    let mut tx = pool.begin().await?;
    match inbox.receive(&mut tx, consumer, job.id()).await? {
        Receipt::Fresh => {
            handler.handle(&mut tx, job).await?;
            tx.commit().await?;
            handler.after_commit(job).await;
            Ok(InboxOutcome::Processed)
        }
        Receipt::Duplicate => {
            tx.rollback().await?;
            tracing::info!(
                job_id = job.id(),
                consumer,
                "duplicate delivery skipped by the inbox"
            );
            handler.on_duplicate(job).await;
            Ok(InboxOutcome::Duplicate)
        }
    }
}
