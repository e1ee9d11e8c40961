//! Consumers: a `bullmq` Worker whose jobs go through postbox's inbox loop
//! ([`InboxConsumer`]): the handler runs inside the inbox transaction, and the
//! job completes only after that transaction commits, or after the message
//! was kept as a dead letter by the consumer's retry policy.
//!
//! A job delivered twice (worker died before completing it, so BullMQ moved it
//! back from stalled; or the relay republished it) finds its id in the inbox
//! and is completed without running the effect again.

use crate::stranded::Stranded;
use bullmq::worker::CancellationToken as JobToken;
use bullmq::worker::WorkerEvent;
use bullmq::{Job, Worker, WorkerOptions};
use postbox::{ConsumeError, Handler, InboxConsumer, Message, Processed};
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

/// Why [`inbox_worker`] did not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum InboxWorkerError {
    /// The inbox cannot be used: the schema is not migrated or outdated, the
    /// role may not read it, or the database did not answer.
    #[error(transparent)]
    Inbox(#[from] postbox::InboxError),
    /// BullMQ's worker could not be made.
    #[error(transparent)]
    Bullmq(#[from] bullmq::Error),
}

/// The trace context the relay put into the job's data (under the default
/// [`TRACE_FIELD`](crate::TRACE_FIELD)). `None` for jobs without one.
pub fn trace_context(job: &Job) -> Option<postbox::TraceContext> {
    postbox::TraceContext::from_json(job.data().get(crate::TRACE_FIELD)?)
}

/// The job as a handler sees it: id = job id (the relay sets it to the
/// outbox event id), topic = queue, name = job name, key and headers from
/// the relay's `_postbox` field, payload = the job's data as JSON without
/// the relay's fields; the trace field's context becomes the
/// `traceparent`/`tracestate` headers. Job data that is a CloudEvent (an
/// object with `specversion`) is read as one ([`postbox::cloudevents::read`]).
pub fn message(queue: &str, job: &Job) -> Message {
    let mut msg = Message::new(job.id(), queue);
    msg.event = Some(job.name().to_owned());
    msg.source = format!("bullmq queue {queue} job {}", job.id());
    let data = job.data();
    if data
        .get("specversion")
        .is_some_and(serde_json::Value::is_string)
    {
        // A CloudEvent (`bullmq.format = "cloudevents"`, or another
        // producer's): the job data is the JSON-format event.
        msg.payload = serde_json::to_vec(data).unwrap_or_default();
        let structured = Some(postbox::wire::CE_STRUCTURED_CONTENT_TYPE);
        return postbox::cloudevents::read(msg, structured);
    }
    let trace = trace_context(job);
    let meta = data
        .get(postbox::wire::BULLMQ_META_FIELD)
        .and_then(serde_json::Value::as_object);
    // Each field is the relay's only when it holds what the relay puts there;
    // a payload's own `_trace` stays in the payload.
    msg.payload = match data.as_object() {
        Some(fields) if trace.is_some() || meta.is_some() => {
            let mut fields = fields.clone();
            if trace.is_some() {
                fields.remove(crate::TRACE_FIELD);
            }
            if meta.is_some() {
                fields.remove(postbox::wire::BULLMQ_META_FIELD);
            }
            serde_json::to_vec(&fields)
        }
        _ => serde_json::to_vec(data),
    }
    .unwrap_or_default();
    if let Some(meta) = meta {
        msg.key = meta
            .get(postbox::wire::BULLMQ_META_KEY)
            .and_then(|k| k.as_str())
            .map(str::to_owned);
        if let Some(headers) = meta
            .get(postbox::wire::BULLMQ_META_HEADERS)
            .and_then(|h| h.as_object())
        {
            for (name, value) in headers {
                if let Some(text) = value.as_str() {
                    msg.headers.push((name.clone(), text.to_owned()));
                }
            }
        }
    }
    if let Some(tc) = trace {
        msg.headers
            .push((postbox::trace::TRACEPARENT.into(), tc.traceparent));
        if let Some(ts) = tc.tracestate {
            msg.headers.push((postbox::trace::TRACESTATE.into(), ts));
        }
    }
    msg
}

/// Worker options that reach Redis at `redis_url` (`redis://…` or
/// `rediss://…`), BullMQ's defaults otherwise, except `drain_delay`: 1 s
/// instead of 5.
///
/// An idle worker waits for the next job in one blocking Redis call of up to
/// `drain_delay` seconds, and closing it waits for that call to end: at 5 s,
/// an idle consumer took up to 5 s to stop. At 1 s it stops within about a
/// second, for one extra round trip to Redis per idle second (a new job
/// still wakes the worker at once). Set `opts.drain_delay` (whole seconds, at
/// least 1) to change it.
pub fn worker_options(redis_url: &str) -> WorkerOptions {
    let mut opts = WorkerOptions::default();
    opts.connection.url = redis_url.to_owned();
    opts.drain_delay = 1;
    opts
}

/// A running BullMQ worker on the inbox loop: await [`run`](InboxWorker::run).
pub struct InboxWorker<H> {
    worker: Worker,
    consumer: InboxConsumer,
    handler: Arc<H>,
    shutdown: CancellationToken,
    close_timeout: Duration,
}

/// Start a BullMQ worker on `queue` whose jobs go through `consumer`'s inbox
/// before `handler` sees them, as [`message`]s.
///
/// What BullMQ sees: a committed, duplicate or dead-lettered job completes
/// with `{"inbox": "processed" | "duplicate" | "dead-lettered"}` (a handler
/// error is retried by the consumer's [`RetryPolicy`](postbox::RetryPolicy)
/// while the worker holds the job, then the job is kept in the inbox's dead
/// letters); a database outage is retried inside the job. Once `shutdown` is
/// cancelled, a job still waiting goes back to the queue unprocessed.
///
/// An unmigrated or outdated schema is refused here, before the worker takes
/// a job ([`InboxConsumer::check`]).
pub async fn inbox_worker<H: Handler>(
    consumer: InboxConsumer,
    queue: &str,
    handler: H,
    opts: WorkerOptions,
    shutdown: CancellationToken,
) -> Result<InboxWorker<H>, InboxWorkerError> {
    consumer.check().await?;
    let handler = Arc::new(handler);
    // Order is only kept by one worker at concurrency 1; more run jobs side by side anyway.
    let stranded = match opts.concurrency {
        1 => Some(Arc::new(Stranded::new(queue, &opts).await?)),
        _ => None,
    };
    let processor = {
        let (consumer, handler, shutdown) = (consumer.clone(), handler.clone(), shutdown.clone());
        let queue: Arc<str> = queue.into();
        move |job: Job, _token: JobToken| {
            let (consumer, handler, shutdown, stranded) = (
                consumer.clone(),
                handler.clone(),
                shutdown.clone(),
                stranded.clone(),
            );
            let queue = queue.clone();
            // Every log line about this job carries its id and trace parent.
            let span = tracing::info_span!(
                "job",
                job_id = job.id(),
                traceparent = trace_context(&job).map(|t| t.traceparent)
            );
            async move {
                if let Some(stranded) = stranded {
                    let ahead = match stranded.ahead_of(&job).await {
                        Ok(ahead) => ahead,
                        Err(e) => {
                            // Unknown whether a job waits ahead: this one goes
                            // back to the front, and the next fetch looks again.
                            tracing::warn!(error = %e, "could not look for stranded jobs; returning the job to the queue");
                            tokio::time::sleep(Duration::from_millis(100)).await;
                            return Err(bullmq::Error::RateLimited { delay_ms: 0 });
                        }
                    };
                    for earlier in ahead {
                        tracing::info!(
                            stranded_job = earlier.id(),
                            "running a job this worker fetched without hearing back, ahead of this one"
                        );
                        let msg = message(&queue, &earlier);
                        outcome(consumer.process(&msg, &*handler, &shutdown).await)?;
                        stranded.ran(earlier.id());
                    }
                }
                let msg = message(&queue, &job);
                outcome(consumer.process(&msg, &*handler, &shutdown).await)
            }
            .instrument(span)
        }
    };
    let worker = Worker::with_options(queue, processor, opts).await?;
    Ok(InboxWorker {
        worker,
        consumer,
        handler,
        shutdown,
        close_timeout: Duration::from_secs(5),
    })
}

fn log_event(event: WorkerEvent) {
    match event {
        WorkerEvent::Failed { job_id, error } => {
            tracing::warn!(job_id, error, "job failed");
        }
        WorkerEvent::Stalled { job_id } => tracing::warn!(
            job_id,
            "job stalled: its worker stopped renewing its lock; BullMQ returns it to the queue"
        ),
        WorkerEvent::Error(error) => tracing::debug!(error, "worker error"),
        _ => {}
    }
}

/// What BullMQ records for a job the inbox loop is done with.
fn outcome(done: Result<Processed, ConsumeError>) -> Result<serde_json::Value, bullmq::Error> {
    match done {
        Ok(Processed::Fresh) => Ok(serde_json::json!({ "inbox": "processed" })),
        Ok(Processed::Duplicate) => Ok(serde_json::json!({ "inbox": "duplicate" })),
        Ok(Processed::DeadLettered) => Ok(serde_json::json!({ "inbox": "dead-lettered" })),
        // Back to the wait list, neither failed nor an attempt used.
        Err(ConsumeError::Cancelled) => Err(bullmq::Error::RateLimited { delay_ms: 0 }),
        Err(e) => Err(bullmq::Error::ProcessingError(e.to_string())),
    }
}

impl<H: Handler> InboxWorker<H> {
    /// How long [`run`](InboxWorker::run) lets jobs in hand finish at
    /// shutdown (default 5 s); a job cut off is redelivered once its lock
    /// expires, and the inbox skips it if it had committed.
    pub fn close_timeout(mut self, limit: Duration) -> Self {
        self.close_timeout = limit;
        self
    }

    /// The BullMQ worker.
    pub fn worker(&self) -> &Worker {
        &self.worker
    }

    /// Serve until `shutdown`: jobs (on the worker's own tasks) and the dead
    /// letters an operator asked to replay; then close the worker.
    ///
    /// It also takes the worker's events ([`Worker::next_event`]) and logs
    /// failed and stalled jobs: the `bullmq` worker queues every event, two
    /// per job, until someone takes it.
    pub async fn run(self) -> Result<(), bullmq::Error> {
        let events = async {
            while let Some(event) = self.worker.next_event().await {
                log_event(event);
            }
        };
        tokio::select! {
            () = self.consumer.serve_replays(&*self.handler, &self.shutdown) => {}
            () = events => {}
        }
        let ms = u64::try_from(self.close_timeout.as_millis()).unwrap_or(u64::MAX);
        self.worker.close(ms).await
    }
}
