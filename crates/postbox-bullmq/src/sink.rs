//! The relay's BullMQ sink: each outbox row becomes `queue(topic).add(event,
//! payload, { jobId: event_id })`, the same job Node's `queue.add` makes.
//!
//! Idempotence comes from BullMQ itself: adding a jobId that exists is a no-op,
//! so a batch republished after a relay crash creates no second job (as long
//! as completed jobs are kept longer than a relay takes to restart; see README).
//! Order: by default a batch goes as one `MULTI`/`EXEC` transaction, which
//! Redis runs in order and all-or-nothing; with `publish = "waves"` (and to
//! find out which jobs an error inside a transaction hit) one event per key per
//! awaited wave.

use crate::{BullmqConfig, PayloadPolicy, PublishMode};
use bullmq::redis_connection::RedisConnection;
use bullmq::{
    options::RedisConnectionOptions, FlowJob, FlowProducer, JobOptions, Queue, QueueOptions,
};
use postbox_relay::{waves, Delivery, OutboxEvent, Sink, SinkError};
use std::collections::hash_map::Entry;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use tokio::sync::Mutex;

/// Fewest events of one key in a batch for it to go as a transaction. The
/// transaction costs two round trips (the crate sends `SCRIPT LOAD` with the
/// add script's full text, then `MULTI`/`EXEC`) and holds Redis for the whole
/// batch; waves cost one round trip per event of the deepest key. Sending
/// batches two deep as transactions made `postbox bench latency` at 1,000
/// msg/s worse (p99 17–34 ms against 10–23 ms in waves).
const TRANSACTION_MIN_DEPTH: usize = 3;

/// Publishes outbox events as BullMQ jobs.
pub struct BullmqSink {
    config: BullmqConfig,
    /// Opened on first use, so the relay starts (and keeps rows safe) while Redis is down.
    conn: Mutex<Option<RedisConnection>>,
    queues: Mutex<HashMap<String, Arc<Queue>>>,
    /// The crate's atomic bulk adder, on the same connection (opened with it).
    flow: Mutex<Option<Arc<FlowProducer>>>,
}

impl BullmqSink {
    /// A sink with `config` (validated here). Does not connect yet.
    pub fn new(config: BullmqConfig) -> Result<Self, postbox_relay::ConfigError> {
        config.validate()?;
        Ok(BullmqSink {
            config,
            conn: Mutex::new(None),
            queues: Mutex::new(HashMap::new()),
            flow: Mutex::new(None),
        })
    }

    async fn connection(&self) -> Result<RedisConnection, SinkError> {
        let mut slot = self.conn.lock().await;
        if let Some(c) = slot.as_ref() {
            return Ok(c.clone());
        }
        let opts = RedisConnectionOptions {
            url: self.config.redis_url.expose().to_owned(),
            ..Default::default()
        };
        let conn = RedisConnection::new_managed_only(&opts)
            .await
            .map_err(|e| {
                classify(
                    e,
                    &format!("cannot connect to Redis at {}", self.config.redis_url),
                )
            })?;
        *slot = Some(conn.clone());
        Ok(conn)
    }

    async fn flow_producer(&self) -> Result<Arc<FlowProducer>, SinkError> {
        if let Some(f) = self.flow.lock().await.as_ref() {
            return Ok(f.clone());
        }
        let conn = self.connection().await?;
        let f = Arc::new(
            FlowProducer::with_connection(conn, Some(self.config.prefix.clone()))
                .map_err(|e| classify(e, "cannot set up the BullMQ bulk adder"))?,
        );
        *self.flow.lock().await = Some(f.clone());
        Ok(f)
    }

    /// Forget the connection: the next attempt opens a fresh one.
    async fn reset(&self) {
        *self.conn.lock().await = None;
        self.queues.lock().await.clear();
        *self.flow.lock().await = None;
    }

    /// The whole batch in one `MULTI`/`EXEC`. `None` when the batch goes in
    /// waves instead: no key has [`TRANSACTION_MIN_DEPTH`] events in it, an
    /// event the sink refuses (its key must stop there), a key whose events go
    /// to more than one queue, or an error reply inside the transaction (only
    /// waves tell which job it was).
    ///
    /// Why per-key order holds: Redis runs the transaction's adds in batch
    /// order with nothing in between, and what can make an add fail inside it
    /// (out of memory, a queue's keys of the wrong type, a missing script) is
    /// the same for every add to one queue. So a later event of a key can
    /// only have succeeded where an earlier one failed if they went to
    /// different queues, and such batches are sent in waves.
    async fn publish_transaction(&self, batch: &[OutboxEvent]) -> Option<Vec<Delivery>> {
        // Per key: its queue and how many events it has in the batch.
        let mut keys: HashMap<&str, (&str, usize)> = HashMap::with_capacity(batch.len());
        let mut depth = 1;
        for e in batch {
            if let Some(k) = e.key.as_deref() {
                match keys.entry(k) {
                    Entry::Vacant(v) => {
                        v.insert((e.topic.as_str(), 1));
                    }
                    Entry::Occupied(mut o) if o.get().0 == e.topic.as_str() => {
                        o.get_mut().1 += 1;
                        depth = depth.max(o.get().1);
                    }
                    Entry::Occupied(_) => return None,
                }
            }
        }
        if depth < TRANSACTION_MIN_DEPTH {
            return None;
        }
        let mut flows = Vec::with_capacity(batch.len());
        for e in batch {
            let data = self.job_for(e).ok()?;
            flows.push(FlowJob {
                name: e.event.clone(),
                queue_name: e.topic.clone(),
                data: data.into_owned(),
                opts: Some(JobOptions {
                    job_id: Some(e.event_id.to_string()),
                    ..Default::default()
                }),
                prefix: None,
                children: None,
            });
        }
        let flow = match self.flow_producer().await {
            Ok(f) => f,
            Err(err) => return Some(self.all_failed(batch, err).await),
        };
        match flow.add_bulk(flows).await {
            Ok(_) => Some(batch.iter().map(|_| Delivery::Delivered).collect()),
            Err(e) if is_connection_error(&e) => {
                let err = classify(
                    e,
                    &format!("adding {} jobs in one transaction", batch.len()),
                );
                Some(self.all_failed(batch, err).await)
            }
            Err(e) => {
                tracing::debug!(error = %e, "error inside the BullMQ transaction; sending the batch again in waves");
                None
            }
        }
    }

    /// Every event failed with `err` (a connection-level failure): the first
    /// event of each key carries it, the rest were not attempted.
    async fn all_failed(&self, batch: &[OutboxEvent], err: SinkError) -> Vec<Delivery> {
        self.reset().await;
        let mut err = Some(err);
        batch
            .iter()
            .map(|_| match err.take() {
                Some(e) => Delivery::Failed(e),
                None => Delivery::Failed(SinkError::NotAttempted),
            })
            .collect()
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

    /// The job data for `e`, built once; or a refusal of what BullMQ cannot or
    /// should not take, with a reason naming the fix.
    fn job_for<'a>(
        &self,
        e: &'a OutboxEvent,
    ) -> Result<std::borrow::Cow<'a, serde_json::Value>, SinkError> {
        if e.topic.contains(':') {
            return Err(SinkError::rejected(format!(
                "topic {:?} is not a valid BullMQ queue name (it contains ':')",
                e.topic
            )));
        }
        if self.config.payload == PayloadPolicy::Object && !e.payload.is_object() {
            return Err(SinkError::rejected(format!(
                "payload is {}, but BullMQ job data must be a JSON object (set bullmq.payload = \"any\" to allow it)",
                kind(&e.payload)
            )));
        }
        let data = self.job_data(e);
        // Counted, not buffered: the crate serialises the data again to send it.
        let mut size = ByteCount(0);
        let size = serde_json::to_writer(&mut size, &*data).map_or(usize::MAX, |()| size.0);
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
    /// The job's data: the payload, plus the trace context under
    /// `trace_field` when the row carries one (never overwriting a payload field).
    fn job_data<'a>(&self, e: &'a OutboxEvent) -> std::borrow::Cow<'a, serde_json::Value> {
        let field = self.config.trace_field.as_str();
        match (&e.payload, postbox::TraceContext::from_json(&e.headers)) {
            (serde_json::Value::Object(map), Some(tc))
                if !field.is_empty() && !map.contains_key(field) =>
            {
                let mut map = map.clone();
                map.insert(field.to_owned(), tc.to_json());
                std::borrow::Cow::Owned(serde_json::Value::Object(map))
            }
            _ => std::borrow::Cow::Borrowed(&e.payload),
        }
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
    fn name(&self) -> &'static str {
        "bullmq"
    }

    async fn publish(&self, batch: &[OutboxEvent]) -> Vec<Delivery> {
        if self.config.publish == PublishMode::Transaction {
            if let Some(results) = self.publish_transaction(batch).await {
                return results;
            }
        }
        self.publish_waves(batch).await
    }

    async fn check(&self) -> Result<(), SinkError> {
        let conn = self.connection().await?;
        conn.ping().await.map_err(|e| classify(e, "Redis PING"))
    }
}

impl BullmqSink {
    async fn publish_waves(&self, batch: &[OutboxEvent]) -> Vec<Delivery> {
        let mut results: Vec<Option<Delivery>> = batch.iter().map(|_| None).collect();
        let mut stopped: HashSet<&str> = HashSet::new();
        let mut broker_down = false;
        for wave in waves(batch) {
            let mut adds = Vec::new();
            for i in wave {
                let e = &batch[i];
                let key = e.key.as_deref();
                if broker_down || key.is_some_and(|k| stopped.contains(k)) {
                    results[i] = Some(Delivery::Failed(SinkError::NotAttempted));
                    continue;
                }
                let queue = match self.job_for(e) {
                    Ok(data) => self.queue(&e.topic).await.map(|q| (q, data)),
                    Err(err) => Err(err),
                };
                match queue {
                    Ok((q, data)) => adds.push(async move {
                        let r = q.add(&e.event, &*data).job_id(e.event_id.to_string()).await;
                        (i, r)
                    }),
                    Err(err) => {
                        if let Some(k) = key {
                            stopped.insert(k);
                        }
                        broker_down |= matches!(err, SinkError::Transient { .. });
                        results[i] = Some(Delivery::Failed(err));
                    }
                }
            }
            for (i, r) in futures::future::join_all(adds).await {
                results[i] = Some(match r {
                    Ok(_) => Delivery::Delivered,
                    Err(err) => {
                        if let Some(k) = batch[i].key.as_deref() {
                            stopped.insert(k);
                        }
                        let err = classify(
                            err,
                            &format!(
                                "adding job {} to queue {:?}",
                                batch[i].event_id, batch[i].topic
                            ),
                        );
                        broker_down |= matches!(err, SinkError::Transient { .. });
                        Delivery::Failed(err)
                    }
                });
            }
        }
        if broker_down {
            // Start the next attempt on a fresh connection: the connection
            // manager's own reconnect backoff (up to seconds) would otherwise
            // hold delivery back well after Redis is reachable again.
            self.reset().await;
        }
        results
            .into_iter()
            .map(|r| r.unwrap_or(Delivery::Failed(SinkError::NotAttempted)))
            .collect()
    }
}
