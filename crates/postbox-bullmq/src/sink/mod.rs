//! The relay's BullMQ sink: each outbox row becomes `queue(topic).add(event,
//! payload, { jobId: event_id })`, the same job Node's `queue.add` makes.
//!
//! Idempotence comes from BullMQ itself: adding a jobId that exists is a no-op,
//! so a batch republished after a relay crash creates no second job (as long
//! as completed jobs are kept longer than a relay takes to restart; see docs/src/sinks/bullmq.md).
//! Order is the delivery layer's: a batch with a deep key goes as one
//! `MULTI`/`EXEC` transaction (`publish = "transaction"`, the default), others
//! in waves of one event per key. This file maps events to jobs and Redis
//! errors to transient or rejected.

use crate::{BullmqConfig, PayloadPolicy, PublishMode};
use bullmq::redis_connection::RedisConnection;
use bullmq::{
    options::RedisConnectionOptions, FlowJob, FlowProducer, JobOptions, Queue, QueueOptions,
};
use postbox_relay::cloudevents::CloudEvents;
use postbox_relay::{
    Encoded, GroupOutcome, GroupPolicy, OutboxEvent, Reconnecting, Sink, SinkError,
};
use serde_json::Value;
use std::collections::HashMap;
use std::sync::Arc;
use tokio::sync::Mutex;

/// Fewest events of one key in a batch for it to go as a transaction. The
/// transaction costs two round trips (the crate sends `SCRIPT LOAD` with the
/// add script's full text, then `MULTI`/`EXEC`) and holds Redis for the whole
/// batch; waves cost one round trip per event of the deepest key. Two-deep
/// batches sent as transactions measured worse latency (`postbox-bench latency`).
const TRANSACTION_MIN_DEPTH: usize = 3;

/// A job's data: the payload as it is, or a copy with the relay's fields
/// (the trace context, the key and headers) added beside its own.
pub enum JobData {
    /// The row's payload.
    Payload,
    /// The payload with the relay's fields added.
    Extended(Value),
}

impl JobData {
    fn of<'a>(&'a self, e: &'a OutboxEvent) -> &'a Value {
        match self {
            JobData::Payload => &e.payload,
            JobData::Extended(v) => v,
        }
    }
}

/// Publishes outbox events as BullMQ jobs.
pub struct BullmqSink {
    config: BullmqConfig,
    /// Opened on first use, so the relay starts (and keeps rows safe) while Redis is down.
    conn: Reconnecting<RedisConnection>,
    queues: Mutex<HashMap<String, Arc<Queue>>>,
    /// The crate's atomic bulk adder, on the same connection (opened with it).
    flow: Reconnecting<Arc<FlowProducer>>,
    /// `format = "cloudevents"`: the writer (set by the relay's config).
    cloudevents: Option<CloudEvents>,
}

impl BullmqSink {
    /// `removeOnComplete` of every job: kept `keep_completed`, in whole
    /// seconds (BullMQ's `age` unit).
    fn keep_completed(&self) -> bullmq::types::RemoveOnFinish {
        bullmq::types::RemoveOnFinish::Options(bullmq::types::KeepJobs {
            age: Some(self.config.keep_completed.as_secs()),
            count: None,
            limit: None,
        })
    }

    /// A sink with `config` (validated here). Does not connect yet.
    pub fn new(config: BullmqConfig) -> Result<Self, postbox_relay::ConfigError> {
        config.validate()?;
        Ok(BullmqSink {
            config,
            conn: Reconnecting::new(),
            queues: Mutex::new(HashMap::new()),
            flow: Reconnecting::new(),
            cloudevents: None,
        })
    }

    /// Write CloudEvents (`format = "cloudevents"`, structured: the event
    /// is the job data), or postbox's format with `None` (what
    /// [`new`](Self::new) does).
    pub fn with_cloudevents(mut self, writer: Option<CloudEvents>) -> Self {
        self.cloudevents = writer;
        self
    }

    async fn connection(&self) -> Result<RedisConnection, SinkError> {
        self.conn
            .get(|| async {
                let opts = RedisConnectionOptions {
                    url: self.config.redis_url.expose().to_owned(),
                    ..Default::default()
                };
                RedisConnection::new_managed_only(&opts).await.map_err(|e| {
                    classify(
                        e,
                        &format!("cannot connect to Redis at {}", self.config.redis_url),
                    )
                })
            })
            .await
    }

    async fn flow_producer(&self) -> Result<Arc<FlowProducer>, SinkError> {
        self.flow
            .get(|| async {
                let conn = self.connection().await?;
                FlowProducer::with_connection(conn, Some(self.config.prefix.clone()))
                    .map(Arc::new)
                    .map_err(|e| classify(e, "cannot set up the BullMQ bulk adder"))
            })
            .await
    }

    async fn queue(&self, name: &str) -> Result<Arc<Queue>, SinkError> {
        if let Some(q) = self.queues.lock().await.get(name) {
            return Ok(q.clone());
        }
        let conn = self.connection().await?;
        let opts = QueueOptions {
            prefix: self.config.prefix.clone(),
            ..Default::default()
        };
        let q = Arc::new(
            Queue::with_connection(name, conn, opts)
                .await
                .map_err(|e| classify(e, &format!("cannot open BullMQ queue {name:?}")))?,
        );
        self.queues.lock().await.insert(name.to_owned(), q.clone());
        Ok(q)
    }

    /// The job data for `e`, or a refusal of what BullMQ cannot or should not
    /// take, with a reason naming the fix.
    fn job_data(&self, e: &OutboxEvent) -> Result<JobData, SinkError> {
        if e.topic.contains(':') {
            return Err(SinkError::rejected(format!(
                "topic {:?} is not a valid BullMQ queue name (it contains ':')",
                e.topic
            )));
        }
        let data = if let Some(ce) = &self.cloudevents {
            // Jobs have no headers: the JSON-format event is the job data
            // (structured mode), whatever the payload.
            let event = ce.event(e)?;
            if let Some((name, _)) = event.headers().first() {
                return Err(SinkError::rejected(format!(
                    "header {name:?} is not a CloudEvents attribute name (a-z, 0-9, at most 20) and a BullMQ job has nowhere else to carry it: rename it, or use bullmq.format = \"postbox\""
                )));
            }
            JobData::Extended(event.to_json())
        } else {
            if self.config.payload == PayloadPolicy::Object && !e.payload.is_object() {
                return Err(SinkError::rejected(format!(
                    "payload is {}, but BullMQ job data must be a JSON object (set bullmq.payload = \"any\" to allow it)",
                    kind(&e.payload)
                )));
            }
            match &e.payload {
                Value::Object(map) => self.extended(e, map)?,
                // Nothing can go beside a payload that is not an object
                // (`payload = "any"`): it travels alone, as documented.
                _ => JobData::Payload,
            }
        };
        // Counted, not buffered: the crate serialises the data again to send it.
        let mut size = ByteCount(0);
        let size = serde_json::to_writer(&mut size, data.of(e)).map_or(usize::MAX, |()| size.0);
        if size > self.config.max_job_bytes {
            return Err(SinkError::rejected(format!(
                "payload is {size} bytes, over bullmq.max_job_bytes ({})",
                self.config.max_job_bytes
            )));
        }
        Ok(data)
    }
}

impl BullmqSink {
    /// The payload's fields and, beside them, the trace context under
    /// `trace_field` (never over a payload field) and the key and headers
    /// under `_postbox`, each only when the event has one.
    fn extended(
        &self,
        e: &OutboxEvent,
        payload: &serde_json::Map<String, Value>,
    ) -> Result<JobData, SinkError> {
        use postbox::wire::{BULLMQ_META_FIELD, BULLMQ_META_HEADERS, BULLMQ_META_KEY};
        let mut added = serde_json::Map::new();
        let field = self.config.trace_field.as_str();
        if let Some(tc) = postbox_relay::headers::trace_context(e) {
            if !field.is_empty() && !payload.contains_key(field) {
                added.insert(field.to_owned(), tc.to_json());
            }
        }
        let mut meta = serde_json::Map::new();
        if let Some(key) = &e.key {
            meta.insert(BULLMQ_META_KEY.into(), Value::String(key.clone()));
        }
        let trace = [postbox::trace::TRACEPARENT, postbox::trace::TRACESTATE];
        let headers: serde_json::Map<String, Value> = postbox_relay::headers::forwarded(e)
            .into_iter()
            .filter(|(name, _)| !trace.contains(name))
            .map(|(name, text)| (name.to_owned(), Value::String(text)))
            .collect();
        if !headers.is_empty() {
            meta.insert(BULLMQ_META_HEADERS.into(), Value::Object(headers));
        }
        if !meta.is_empty() {
            if payload.contains_key(BULLMQ_META_FIELD) {
                return Err(SinkError::rejected(format!(
                    "the payload has a field {BULLMQ_META_FIELD:?} of its own, where the sink carries the event's key and headers: rename it"
                )));
            }
            added.insert(BULLMQ_META_FIELD.into(), Value::Object(meta));
        }
        if added.is_empty() {
            return Ok(JobData::Payload);
        }
        let mut map = payload.clone();
        map.extend(added);
        Ok(JobData::Extended(Value::Object(map)))
    }
}

/// A writer that only counts the bytes written to it.
struct ByteCount(usize);

impl std::io::Write for ByteCount {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0 += buf.len();
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn kind(v: &serde_json::Value) -> &'static str {
    match v {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "a boolean",
        serde_json::Value::Number(_) => "a number",
        serde_json::Value::String(_) => "a string",
        serde_json::Value::Array(_) => "an array",
        serde_json::Value::Object(_) => "an object",
    }
}

/// Transient unless the error is about this job itself: only a failure that
/// another attempt cannot fix may consume attempts and dead-letter a row.
fn classify(e: bullmq::Error, context: &str) -> SinkError {
    use bullmq::Error as E;
    let message = format!("{context}: {e}");
    let rejected = match &e {
        E::Serialization(_) | E::InvalidConfig(_) | E::MsgPack(_) | E::Script { .. } => true,
        // Connection-level and server-state errors (LOADING, READONLY, OOM,
        // BUSY, ...) pass; only a plain `ERR` reply to our script (this job
        // itself was refused) is a rejection.
        E::Redis(r) => {
            !(r.is_io_error()
                || r.is_timeout()
                || r.is_connection_dropped()
                || r.is_connection_refusal())
                && matches!(r.code(), Some("ERR") | Some("WRONGTYPE"))
                // Redis refuses a connection over maxclients with a plain
                // ERR too: the server's state, not the job's.
                && !r
                    .detail()
                    .is_some_and(|d| d.starts_with("max number of clients"))
        }
        _ => false,
    };
    if rejected {
        SinkError::Rejected {
            message,
            source: Some(Box::new(e)),
        }
    } else {
        SinkError::Transient {
            message,
            source: Some(Box::new(e)),
        }
    }
}

/// The connection itself failed (nothing or everything of a transaction ran;
/// either way another attempt is safe), as opposed to an error reply.
fn is_connection_error(e: &bullmq::Error) -> bool {
    match e {
        bullmq::Error::Redis(r) => {
            r.is_io_error()
                || r.is_timeout()
                || r.is_connection_dropped()
                || r.is_connection_refusal()
        }
        _ => false,
    }
}

#[async_trait::async_trait]
impl Sink for BullmqSink {
    type Message = JobData;

    fn name(&self) -> &'static str {
        "bullmq"
    }

    fn encode(&self, event: &OutboxEvent) -> Result<JobData, SinkError> {
        self.job_data(event)
    }

    async fn send_wave(&self, wave: Vec<Encoded<'_, JobData>>) -> Vec<Result<(), SinkError>> {
        let adds = wave.iter().map(|m| async move {
            let e = m.event;
            let q = self.queue(&e.topic).await?;
            q.add(&e.event, m.message.of(e))
                .job_id(e.event_id.to_string())
                .remove_on_complete(self.keep_completed())
                .await
                .map(drop)
                .map_err(|err| {
                    classify(
                        err,
                        &format!("adding job {} to queue {:?}", e.event_id, e.topic),
                    )
                })
        });
        futures::future::join_all(adds).await
    }

    fn groups(&self) -> Option<GroupPolicy> {
        (self.config.publish == PublishMode::Transaction).then_some(GroupPolicy {
            min_key_depth: TRANSACTION_MIN_DEPTH,
        })
    }

    /// The batch as one `MULTI`/`EXEC` of BullMQ's add scripts. Redis runs
    /// them in order with nothing in between; what can make one fail inside
    /// (out of memory, a queue's keys of the wrong type, a missing script) is
    /// the same for every add to one queue, so no later event of a key can
    /// succeed where an earlier one failed (the layer keeps each key to one
    /// queue). An error reply is `Unclear`: waves find out which job it was.
    async fn send_group(&self, group: Vec<Encoded<'_, JobData>>) -> GroupOutcome {
        let n = group.len();
        let flows = group
            .into_iter()
            .map(|m| FlowJob {
                name: m.event.event.clone(),
                queue_name: m.event.topic.clone(),
                data: match m.message {
                    JobData::Payload => m.event.payload.clone(),
                    JobData::Extended(v) => v,
                },
                opts: Some(JobOptions {
                    job_id: Some(m.event.event_id.to_string()),
                    remove_on_complete: Some(self.keep_completed()),
                    ..Default::default()
                }),
                prefix: None,
                children: None,
            })
            .collect();
        let flow = match self.flow_producer().await {
            Ok(f) => f,
            Err(err) => return GroupOutcome::Failed(err),
        };
        match flow.add_bulk(flows).await {
            Ok(_) => GroupOutcome::Delivered,
            Err(e) if is_connection_error(&e) => {
                GroupOutcome::Failed(classify(e, &format!("adding {n} jobs in one transaction")))
            }
            Err(e) => {
                tracing::debug!(error = %e, "error reply inside the BullMQ transaction");
                GroupOutcome::Unclear
            }
        }
    }

    async fn reset(&self) {
        self.conn.reset().await;
        self.queues.lock().await.clear();
        self.flow.reset().await;
    }

    /// A plain connection to the URL first: BullMQ's managed connection
    /// retries a refused or failing connection by itself and never says why,
    /// where this one fails with the cause (refused, DNS, TLS, auth).
    async fn check(&self) -> Result<(), SinkError> {
        let url = &self.config.redis_url;
        let unreachable =
            |e: redis::RedisError| SinkError::transient(format!("connecting to {url}: {e}"));
        let mut plain = redis::Client::open(url.expose())
            .map_err(unreachable)?
            .get_multiplexed_async_connection()
            .await
            .map_err(unreachable)?;
        redis::cmd("PING")
            .query_async::<String>(&mut plain)
            .await
            .map_err(unreachable)?;
        let conn = self.connection().await?;
        conn.ping().await.map_err(|e| classify(e, "Redis PING"))
    }
}

#[cfg(test)]
mod tests;
