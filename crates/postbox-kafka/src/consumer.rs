//! Consumers: each Kafka message goes through postbox's inbox loop
//! ([`postbox::InboxConsumer`]) and its offset is committed only after the inbox
//! transaction commits. A crash in between replays the message; the inbox
//! recognises it and skips the effect.

use crate::{HEADER_EVENT, HEADER_EVENT_ID};
use postbox::{BoxError, Handler, InboxConsumer, Message};
use rdkafka::consumer::{CommitMode, Consumer, StreamConsumer};
use rdkafka::message::{Headers, Message as _, OwnedMessage};
use tokio_util::sync::CancellationToken;

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

/// The Kafka message as a handler sees it: id = [`message_id`], topic, name
/// = the `postbox-event` header, key and payload as delivered, every header
/// whose value is UTF-8 (the relay's are), in order. A CloudEvent (`ce_*`
/// headers, or an `application/cloudevents+json` value) is read as one
/// ([`postbox::cloudevents::read`]).
pub fn message(msg: &OwnedMessage) -> Message {
    let mut m = Message::new(message_id(msg), msg.topic());
    m.key = msg.key().map(|k| String::from_utf8_lossy(k).into_owned());
    m.payload = msg.payload().unwrap_or_default().to_vec();
    if let Some(headers) = msg.headers() {
        for h in headers.iter() {
            if let Some(v) = h.value.and_then(|v| std::str::from_utf8(v).ok()) {
                m.headers.push((h.key.to_owned(), v.to_owned()));
            }
        }
    }
    m.event = m.header(HEADER_EVENT).map(str::to_owned);
    m.source = format!("kafka {}/{}@{}", msg.topic(), msg.partition(), msg.offset());
    postbox::cloudevents::read(m, None)
}

/// Consume from `kafka` (already subscribed) until `shutdown`, each message
/// through `inbox` (postbox's inbox loop) before its offset is committed, and
/// run the dead letters an operator asked to replay.
///
/// A handler error rolls back and the same message is retried by the
/// consumer's [`RetryPolicy`](postbox::RetryPolicy), before any later message
/// of its partition (Kafka's order is the partition's); after the last
/// attempt it is kept as a dead letter and the partition moves on. A
/// database outage is retried inside the inbox loop. On shutdown the message
/// in hand is left uncommitted and is delivered again.
pub async fn inbox_consumer<H: Handler>(
    inbox: &InboxConsumer,
    kafka: &StreamConsumer,
    handler: &H,
    shutdown: CancellationToken,
) -> Result<(), BoxError> {
    // An unmigrated schema is refused here, not at the first message.
    inbox.check().await?;
    tokio::select! {
        done = receive(inbox, kafka, handler, &shutdown) => done,
        () = inbox.serve_replays(handler, &shutdown) => Ok(()),
    }
}

async fn receive<H: Handler>(
    inbox: &InboxConsumer,
    kafka: &StreamConsumer,
    handler: &H,
    shutdown: &CancellationToken,
) -> Result<(), BoxError> {
    loop {
        let raw = tokio::select! {
            _ = shutdown.cancelled() => return Ok(()),
            m = kafka.recv() => m?.detach(),
        };
        let msg = message(&raw);
        if inbox
            .process_in_place(&msg, handler, shutdown)
            .await
            .is_none()
        {
            return Ok(());
        }
        // Only now: the effect is committed, so a replay would be skipped.
        let mut tpl = rdkafka::TopicPartitionList::new();
        tpl.add_partition_offset(
            raw.topic(),
            raw.partition(),
            rdkafka::Offset::Offset(raw.offset() + 1),
        )?;
        kafka.commit(&tpl, CommitMode::Sync)?;
    }
}
