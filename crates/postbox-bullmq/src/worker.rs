//! Consumers: a `bullmq` Worker whose jobs go through postbox's inbox loop
//! ([`postbox::InboxConsumer`]): the handler runs inside the inbox transaction, and
//! the job completes only after that transaction commits.
//!
//! A job delivered twice (worker died before completing it, so BullMQ moved it
//! back from stalled; or the relay republished it) finds its id in the inbox
//! and is completed without running the effect again.

use bullmq::worker::CancellationToken as JobToken;
use bullmq::{Job, Worker, WorkerOptions};
use postbox::{ConsumeError, Handler, InboxConsumer, Processed};
use std::sync::Arc;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

/// The trace context the relay put into the job's data (under the default
/// [`TRACE_FIELD`](crate::TRACE_FIELD)), for the handler to continue the
/// producer's trace. `None` for jobs without one (or from other producers).
pub fn trace_context(job: &Job) -> Option<postbox::TraceContext> {
    postbox::TraceContext::from_json(job.data().get(crate::TRACE_FIELD)?)
}

/// Start a BullMQ worker on `queue` whose jobs go through `consumer`'s inbox
/// before `handler` sees them. The message id is the job id, which the relay
/// sets to the outbox event id.
///
/// What BullMQ sees: a committed (or duplicate) job completes with
/// `{"inbox": "processed" | "duplicate"}`; a handler error fails the job
/// (BullMQ's `attempts` apply); a database outage is retried inside the job.
/// Once `shutdown` is cancelled, a job still waiting for the database goes back
/// to the queue unprocessed; then close the worker (`worker.close(ms)`).
pub async fn inbox_worker<H: Handler<Job>>(
    consumer: InboxConsumer,
    queue: &str,
    handler: Arc<H>,
    opts: WorkerOptions,
    shutdown: CancellationToken,
) -> Result<Worker, bullmq::Error> {
    let processor = move |job: Job, _token: JobToken| {
        let (consumer, handler, shutdown) = (consumer.clone(), handler.clone(), shutdown.clone());
        // Every log line about this job carries its id and trace parent.
        let span = tracing::info_span!(
            "job",
            job_id = job.id(),
            traceparent = trace_context(&job).map(|t| t.traceparent)
        );
        async move {
            let done = consumer
                .process(job.id(), &job, &*handler, &shutdown)
                .instrument(span)
                .await;
            match done {
                Ok(Processed::Fresh) => Ok(serde_json::json!({ "inbox": "processed" })),
                Ok(Processed::Duplicate) => Ok(serde_json::json!({ "inbox": "duplicate" })),
                // Back to the wait list, neither failed nor an attempt used.
                Err(ConsumeError::Cancelled) => Err(bullmq::Error::RateLimited { delay_ms: 0 }),
                Err(e) => Err(bullmq::Error::ProcessingError(e.to_string())),
            }
        }
    };
    Worker::with_options(queue, processor, opts).await
}
