//! Consumers: a consumer group's entries, each through postbox's inbox loop
//! ([`InboxConsumer`]) and `XACK`ed only after the inbox transaction
//! commits (or the message was kept as a dead letter). A consumer that dies
//! in between leaves the entry pending: on restart under the same consumer
//! name it reads its own pending entries first, and any consumer of the
//! group takes over entries left idle for [`ConsumerOptions::claim_idle`]
//! (`XAUTOCLAIM`). The inbox skips what was already applied, including the
//! relay's re-sends, which Redis Streams cannot remove.
//!
//! Order: entries are handled one at a time in stream order and a failing
//! one is retried in place. Several consumers in one group share a stream
//! without order between them: one consumer per group where per-key order
//! matters (entries it takes over from a dead one come back out of order).

use postbox::{BoxError, Handler, InboxConsumer, Message};
use redis::aio::MultiplexedConnection;
use redis::streams::{StreamAutoClaimReply, StreamId, StreamReadReply};
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

/// How a consumer reads its stream.
#[derive(Debug, Clone)]
pub struct ConsumerOptions {
    /// Consumer group (created at the stream's start, `0`, if missing).
    pub group: String,
    /// This consumer's name in the group; keep it stable across restarts so
    /// a restarted consumer finds its own pending entries.
    pub consumer: String,
    /// Entries read per `XREADGROUP` (still handled one at a time).
    pub count: usize,
    /// How long one `XREADGROUP` waits for new entries.
    pub block: Duration,
    /// Take over another consumer's entry once it has been pending this long
    /// without an ack (`XAUTOCLAIM` min-idle-time). Keep it above the time a
    /// handler and its retry policy can take.
    pub claim_idle: Duration,
}

impl ConsumerOptions {
    /// Group `group`, consumer `consumer`, 32 entries a read, 1 s blocks,
    /// stalled entries taken over after 60 s.
    pub fn new(group: &str, consumer: &str) -> Self {
        ConsumerOptions {
            group: group.to_owned(),
            consumer: consumer.to_owned(),
            count: 32,
            block: Duration::from_secs(1),
            claim_idle: Duration::from_secs(60),
        }
    }
}

/// The entry as a handler sees it: id = field `id` (the relay sets it to
/// the event id; else `stream/entry-id`), topic = the stream, name = field
/// `event`, key = field `key`, payload = field `payload`, headers = the
/// `headers` field's JSON object. An entry with CloudEvents fields (`ce-*`,
/// `content-type`) is read as a CloudEvent ([`postbox::cloudevents::read`]).
pub fn message(stream: &str, entry: &StreamId) -> Message {
    let field = |name: &str| -> Option<String> {
        entry
            .map
            .get(name)
            .and_then(|v| redis::from_redis_value_ref::<String>(v).ok())
    };
    let id = field(crate::FIELD_ID).unwrap_or_else(|| format!("{stream}/{}", entry.id));
    let mut msg = Message::new(id, stream);
    msg.event = field(crate::FIELD_EVENT);
    msg.key = field(crate::FIELD_KEY);
    msg.payload = field(crate::FIELD_PAYLOAD).unwrap_or_default().into_bytes();
    if let Some(headers) = field(crate::FIELD_HEADERS) {
        if let Ok(serde_json::Value::Object(map)) = serde_json::from_str(&headers) {
            for (name, value) in map {
                if let serde_json::Value::String(text) = value {
                    msg.headers.push((name, text));
                }
            }
        }
    }
    // CloudEvents fields (`ce-*`, `content-type`) join the headers, and
    // the message is read as the CloudEvent it then carries.
    for name in entry.map.keys() {
        let ce =
            name.starts_with(postbox::wire::CE_PREFIX) || name == postbox::wire::CE_CONTENT_TYPE;
        if let (true, Some(text)) = (ce, field(name)) {
            msg.headers.push((name.clone(), text));
        }
    }
    msg.source = format!("redis stream {stream} entry {}", entry.id);
    postbox::cloudevents::read(msg, None)
}

/// Consume `stream` as `options.consumer` of `options.group` until
/// `shutdown`, each entry through `inbox` before it is acknowledged, and run
/// the dead letters an operator asked to replay. A handler error is retried
/// by the consumer's [`RetryPolicy`](postbox::RetryPolicy) before any later
/// entry, then the message is kept as a dead letter and acknowledged; a
/// database outage is retried inside the inbox loop. Returns an error when
/// Redis fails (the caller reconnects and calls again).
pub async fn inbox_consumer<H: Handler>(
    inbox: &InboxConsumer,
    client: &redis::Client,
    stream: &str,
    handler: &H,
    options: ConsumerOptions,
    shutdown: CancellationToken,
) -> Result<(), BoxError> {
    // An unmigrated schema is refused here, not at the first message.
    inbox.check().await?;
    // A blocking read must not be cut off by the client's response timeout.
    let config = redis::AsyncConnectionConfig::new().set_response_timeout(None);
    let connection = client
        .get_multiplexed_async_connection_with_config(&config)
        .await?;
    let reader = Reader {
        connection,
        stream,
        options: &options,
    };
    tokio::select! {
        done = reader.run(inbox, handler, &shutdown) => done,
        () = inbox.serve_replays(handler, &shutdown) => Ok(()),
    }
}

struct Reader<'a> {
    connection: MultiplexedConnection,
    stream: &'a str,
    options: &'a ConsumerOptions,
}

impl Reader<'_> {
    async fn run<H: Handler>(
        mut self,
        inbox: &InboxConsumer,
        handler: &H,
        shutdown: &CancellationToken,
    ) -> Result<(), BoxError> {
        self.create_group().await?;
        // First what this consumer read before and never acknowledged.
        loop {
            let pending = self.read("0", None).await?;
            if pending.is_empty() {
                break;
            }
            if !self.handle(pending, inbox, handler, shutdown).await? {
                return Ok(());
            }
        }
        let mut next_claim = Instant::now();
        loop {
            if Instant::now() >= next_claim {
                let claimed = self.claim().await?;
                if !self.handle(claimed, inbox, handler, shutdown).await? {
                    return Ok(());
                }
                next_claim =
                    Instant::now() + (self.options.claim_idle / 2).max(Duration::from_millis(100));
            }
            let block = Some(self.options.block);
            let entries = tokio::select! {
                _ = shutdown.cancelled() => return Ok(()),
                r = self.read(">", block) => r?,
            };
            if !self.handle(entries, inbox, handler, shutdown).await? {
                return Ok(());
            }
        }
    }

    async fn create_group(&mut self) -> Result<(), BoxError> {
        let created: redis::RedisResult<()> = redis::cmd("XGROUP")
            .arg("CREATE")
            .arg(self.stream)
            .arg(&self.options.group)
            .arg("0")
            .arg("MKSTREAM")
            .query_async(&mut self.connection)
            .await;
        match created {
            Err(e) if e.code() != Some("BUSYGROUP") => Err(format!(
                "cannot create consumer group {:?} on stream {:?}: {e}",
                self.options.group, self.stream
            )
            .into()),
            _ => Ok(()),
        }
    }

    /// `XREADGROUP` from `id` (`0`: this consumer's pending entries; `>`: new ones).
    async fn read(&mut self, id: &str, block: Option<Duration>) -> Result<Vec<StreamId>, BoxError> {
        let mut cmd = redis::cmd("XREADGROUP");
        cmd.arg("GROUP")
            .arg(&self.options.group)
            .arg(&self.options.consumer)
            .arg("COUNT")
            .arg(self.options.count);
        if let Some(b) = block {
            cmd.arg("BLOCK").arg(b.as_millis() as u64);
        }
        cmd.arg("STREAMS").arg(self.stream).arg(id);
        let reply: Option<StreamReadReply> = cmd.query_async(&mut self.connection).await?;
        Ok(reply
            .into_iter()
            .flat_map(|r| r.keys)
            .flat_map(|k| k.ids)
            .collect())
    }

    /// Entries of other consumers idle past `claim_idle`, now this one's.
    async fn claim(&mut self) -> Result<Vec<StreamId>, BoxError> {
        let reply: StreamAutoClaimReply = redis::cmd("XAUTOCLAIM")
            .arg(self.stream)
            .arg(&self.options.group)
            .arg(&self.options.consumer)
            .arg(self.options.claim_idle.as_millis() as u64)
            .arg("0-0")
            .arg("COUNT")
            .arg(self.options.count)
            .query_async(&mut self.connection)
            .await?;
        if !reply.claimed.is_empty() {
            tracing::info!(
                stream = self.stream,
                group = %self.options.group,
                claimed = reply.claimed.len(),
                "took over entries a consumer left unacknowledged"
            );
        }
        Ok(reply.claimed)
    }

    /// Each entry through the inbox, then `XACK`. False once shut down.
    async fn handle<H: Handler>(
        &mut self,
        entries: Vec<StreamId>,
        inbox: &InboxConsumer,
        handler: &H,
        shutdown: &CancellationToken,
    ) -> Result<bool, BoxError> {
        for entry in entries {
            let msg = message(self.stream, &entry);
            if inbox
                .process_in_place(&msg, handler, shutdown)
                .await
                .is_none()
            {
                return Ok(false);
            }
            // Only now: the effect is committed, so a redelivery would be skipped.
            let _: i64 = redis::cmd("XACK")
                .arg(self.stream)
                .arg(&self.options.group)
                .arg(&entry.id)
                .query_async(&mut self.connection)
                .await?;
        }
        Ok(true)
    }
}
