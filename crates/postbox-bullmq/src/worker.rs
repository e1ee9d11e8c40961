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
use tracing::Instrument;

/// The trace context the relay put into the job's data (under the default
/// [`TRACE_FIELD`](crate::TRACE_FIELD)), for the handler to continue the
/// producer's trace. `None` for jobs without one (or from other producers).
pub fn trace_context(job: &Job) -> Option<postbox::TraceContext> {
    postbox::TraceContext::from_json(job.data().get(crate::TRACE_FIELD)?)
}

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
        // Every log line about this job carries its id and trace parent.
        let span = tracing::info_span!(
            "job",
            job_id = job.id(),
            traceparent = trace_context(&job).map(|t| t.traceparent)
        );
        async move {
            let outcome = process(&pool, &inbox, &consumer, &*handler, &job)
                .instrument(span)
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

/// One attempt's failure: whether trying the transaction again can help.
enum Failure {
    /// The database was unreachable or the session died: retry.
    Database(sqlx::Error),
    /// The handler (or the data) failed: fail the job, BullMQ's policy applies.
    Job(postbox_relay::BoxError),
}

impl From<postbox::Error> for Failure {
    fn from(e: postbox::Error) -> Self {
        match e {
            postbox::Error::Database(e) => classify(e),
            other => Failure::Job(other.into()),
        }
    }
}

/// Connection trouble and server shutdowns are transient: the job must not
/// fail for them (a job has one attempt by default, so a failed job would be
/// a lost message). SQLSTATE classes 08 (connection), 57P01-03 (shutdown,
/// cannot connect now), 40001/40P01 (serialization, deadlock).
fn classify(e: sqlx::Error) -> Failure {
    let transient = match &e {
        sqlx::Error::Io(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::Protocol(_)
        | sqlx::Error::WorkerCrashed => true,
        sqlx::Error::Database(db) => db.code().is_some_and(|c| {
            c.starts_with("08")
                || matches!(c.as_ref(), "57P01" | "57P02" | "57P03" | "40001" | "40P01")
        }),
        _ => false,
    };
    if transient {
        Failure::Database(e)
    } else {
        Failure::Job(e.into())
    }
}

/// Longest time one job keeps retrying a database outage before it fails.
const DATABASE_PATIENCE: std::time::Duration = std::time::Duration::from_secs(600);

async fn process<H: InboxHandler>(
    pool: &PgPool,
    inbox: &Inbox,
    consumer: &str,
    handler: &H,
    job: &Job,
) -> Result<InboxOutcome, postbox_relay::BoxError> {
    let started = std::time::Instant::now();
    let mut delay = std::time::Duration::from_millis(100);
    // Set when a COMMIT failed without an answer: it may have gone through.
    let mut commit_in_doubt = false;
    loop {
        match attempt(pool, inbox, consumer, handler, job, &mut commit_in_doubt).await {
            Ok(outcome) => return Ok(outcome),
            Err(Failure::Job(e)) => return Err(e),
            Err(Failure::Database(e)) if started.elapsed() < DATABASE_PATIENCE => {
                tracing::warn!(job_id = job.id(), consumer, error = %e, retry_in = ?delay, "database unavailable; retrying the job's transaction");
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(std::time::Duration::from_secs(5));
            }
            Err(Failure::Database(e)) => return Err(e.into()),
        }
    }
}

async fn attempt<H: InboxHandler>(
    pool: &PgPool,
    inbox: &Inbox,
    consumer: &str,
    handler: &H,
    job: &Job,
    commit_in_doubt: &mut bool,
) -> Result<InboxOutcome, Failure> {
    let mut tx = pool.begin().await.map_err(classify)?;
    match inbox.receive(&mut tx, consumer, job.id()).await? {
        Receipt::Fresh => {
            handler
                .handle(&mut tx, job)
                .await
                .map_err(|e| match e.downcast::<sqlx::Error>() {
                    Ok(db) => classify(*db),
                    Err(other) => match other.downcast::<postbox::Error>() {
                        Ok(pe) => Failure::from(*pe),
                        Err(other) => Failure::Job(other),
                    },
                })?;
            if let Err(e) = tx.commit().await {
                *commit_in_doubt = true;
                return Err(classify(e));
            }
            handler.after_commit(job).await;
            Ok(InboxOutcome::Processed)
        }
        Receipt::Duplicate => {
            let _ = tx.rollback().await;
            if *commit_in_doubt {
                // Our own earlier COMMIT went through after all: finish its work.
                handler.after_commit(job).await;
                return Ok(InboxOutcome::Processed);
            }
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
