//! Consumers: each Kafka message is handled inside the inbox transaction, and
//! its offset is committed only after that transaction commits. A crash in
//! between replays the message; the inbox recognises it and skips the effect.

use crate::HEADER_EVENT_ID;
use postbox::{Inbox, Receipt};
use postbox_relay::BoxError;
use rdkafka::consumer::{CommitMode, Consumer, StreamConsumer};
use rdkafka::message::{Headers, Message, OwnedMessage};
use sqlx::{PgConnection, PgPool};
use std::time::Duration;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

/// The effect of a message, run in the inbox transaction.
#[async_trait::async_trait]
pub trait KafkaHandler: Send + Sync + 'static {
    /// Perform the effect on `tx`. An error rolls back and the same message is
    /// retried (after a backoff) before any later message of its partition.
    async fn handle(&self, tx: &mut PgConnection, msg: &OwnedMessage) -> Result<(), BoxError>;
    /// After the database commit, before the offset commit.
    async fn after_commit(&self, _msg: &OwnedMessage) {}
    /// The message was already in the inbox; its effect was skipped.
    async fn on_duplicate(&self, _msg: &OwnedMessage) {}
}

/// The inbox key of a message: its `postbox-event-id` header, else its
/// coordinates (for producers that are not postbox).
pub fn message_id(msg: &OwnedMessage) -> String {
    msg.headers()
        .and_then(|h| {
            h.iter()
                .find(|h| h.key == HEADER_EVENT_ID)
                .and_then(|h| h.value)
        })
        .and_then(|v| std::str::from_utf8(v).ok())
        .map(str::to_owned)
        .unwrap_or_else(|| format!("{}/{}/{}", msg.topic(), msg.partition(), msg.offset()))
}

/// The W3C trace context the relay copied from the outbox row into the
/// message's `traceparent`/`tracestate` headers, for the handler to continue
/// the producer's trace.
pub fn trace_context(msg: &OwnedMessage) -> Option<postbox::TraceContext> {
    let header = |name: &str| {
        msg.headers()?
            .iter()
            .find(|h| h.key == name)
            .and_then(|h| h.value)
            .and_then(|v| std::str::from_utf8(v).ok())
    };
    let mut tc = postbox::TraceContext::new(header(postbox::trace::TRACEPARENT)?).ok()?;
    tc.tracestate = header(postbox::trace::TRACESTATE).map(str::to_owned);
    Some(tc)
}

/// Consumer settings that the inbox pattern needs: manual offset commits, and
/// group timings short enough for quick rebalances.
pub fn consumer_config(brokers: &str, group: &str) -> rdkafka::ClientConfig {
    let mut c = rdkafka::ClientConfig::new();
    c.set("bootstrap.servers", brokers)
        .set("group.id", group)
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        .set("auto.offset.reset", "earliest")
        .set("session.timeout.ms", "6000")
        .set("heartbeat.interval.ms", "1000");
    c
}

/// Consume from `consumer` (already subscribed) until `shutdown`, as `name`
/// in `inbox`.
pub async fn inbox_consumer<H: KafkaHandler>(
    pool: &PgPool,
    inbox: &Inbox,
    name: &str,
    consumer: &StreamConsumer,
    handler: &H,
    shutdown: CancellationToken,
) -> Result<(), BoxError> {
    loop {
        let msg = tokio::select! {
            _ = shutdown.cancelled() => return Ok(()),
            m = consumer.recv() => m?.detach(),
        };
        let mut delay = Duration::from_millis(100);
        // Every log line about this message carries its id and trace parent.
        let span = tracing::info_span!(
            "message",
            message_id = %message_id(&msg),
            traceparent = trace_context(&msg).map(|t| t.traceparent)
        );
        loop {
            match process(pool, inbox, name, handler, &msg)
                .instrument(span.clone())
                .await
            {
                Ok(()) => break,
                Err(e) => {
                    tracing::warn!(error = %e, topic = msg.topic(), partition = msg.partition(), offset = msg.offset(), "handler failed; retrying the message");
                    tokio::select! {
                        _ = shutdown.cancelled() => return Ok(()),
                        _ = tokio::time::sleep(delay) => {}
                    }
                    delay = (delay * 2).min(Duration::from_secs(5));
                }
            }
        }
        // Only now: the effect is committed, so a replay would be skipped.
        let mut tpl = rdkafka::TopicPartitionList::new();
        tpl.add_partition_offset(
            msg.topic(),
            msg.partition(),
            rdkafka::Offset::Offset(msg.offset() + 1),
        )?;
        consumer.commit(&tpl, CommitMode::Sync)?;
    }
}

async fn process<H: KafkaHandler>(
    pool: &PgPool,
    inbox: &Inbox,
    name: &str,
    handler: &H,
    msg: &OwnedMessage,
) -> Result<(), BoxError> {
    let id = message_id(msg);
    let mut tx = pool.begin().await?;
    match inbox.receive(&mut tx, name, &id).await? {
        Receipt::Fresh => {
            handler.handle(&mut tx, msg).await?;
            tx.commit().await?;
            handler.after_commit(msg).await;
        }
        Receipt::Duplicate => {
            tx.rollback().await?;
            tracing::info!(message_id = %id, consumer = name, "duplicate delivery skipped by the inbox");
            handler.on_duplicate(msg).await;
        }
    }
    Ok(())
}
