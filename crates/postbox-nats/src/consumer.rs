//! Consumers: each JetStream message of a durable pull consumer goes through
//! postbox's inbox loop ([`InboxConsumer`]) and is acknowledged only after
//! the inbox transaction commits (or the message was kept as a dead letter).
//! A consumer that dies in between leaves it unacknowledged: JetStream
//! redelivers it after `ack_wait`, and the inbox skips its effect.
//!
//! Order: messages are handled one at a time in stream order and a failing
//! one is retried in place. Keep `ack_wait` longer than the handler's retry
//! policy takes (or a message is redelivered while still in hand; the inbox
//! then skips it once committed), and one consumer instance per durable
//! consumer where per-key order matters. [`consumer_config`] lets one message
//! at a time be unacknowledged: with more, a consumer that dies leaves the
//! messages it was handed waiting out `ack_wait` while later ones go to its
//! successor, and those take effect first.

use futures::StreamExt;
use postbox::{BoxError, Handler, InboxConsumer, Message};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// A durable pull consumer that acknowledges explicitly, redelivers what
/// was not acknowledged after 60 s, never gives up on a message
/// (`max_deliver` unlimited: the inbox loop's retry policy and dead letters
/// decide when a message is given up), and hands out one message at a time
/// (`max_ack_pending` 1: stream order holds across a consumer's crash; raise
/// it where order does not matter, for throughput). Change fields before
/// creating it.
pub fn consumer_config(durable: &str) -> async_nats::jetstream::consumer::pull::Config {
    async_nats::jetstream::consumer::pull::Config {
        durable_name: Some(durable.to_owned()),
        ack_policy: async_nats::jetstream::consumer::AckPolicy::Explicit,
        ack_wait: Duration::from_secs(60),
        max_deliver: -1,
        max_ack_pending: 1,
        ..Default::default()
    }
}

/// The message as a handler sees it: id = `Nats-Msg-Id` (the relay sets it
/// to the event id; else `stream/sequence`), topic = subject, name and key =
/// the `postbox-event` and `postbox-key` headers, every header (first value).
pub fn message(m: &async_nats::jetstream::Message) -> Message {
    let info = m.info().ok();
    let id = m
        .headers
        .as_ref()
        .and_then(|h| h.get(async_nats::header::NATS_MESSAGE_ID))
        .map(|v| v.to_string())
        .or_else(|| {
            info.as_ref()
                .map(|i| format!("{}/{}", i.stream, i.stream_sequence))
        })
        .unwrap_or_default();
    let mut msg = Message::new(id, m.subject.as_str());
    msg.payload = m.payload.to_vec();
    if let Some(h) = &m.headers {
        for (name, values) in h.iter() {
            if let Some(v) = values.first() {
                msg.headers.push((name.to_string(), v.to_string()));
            }
        }
    }
    msg.event = msg.header(crate::HEADER_EVENT).map(str::to_owned);
    msg.key = msg.header(crate::HEADER_KEY).map(str::to_owned);
    msg.source = match info {
        Some(i) => format!(
            "nats stream {} seq {} (delivery {})",
            i.stream, i.stream_sequence, i.delivered
        ),
        None => format!("nats subject {}", m.subject),
    };
    // A CloudEvent (`ce-*` headers, or a structured body) reads as one.
    postbox::cloudevents::read(msg, None)
}

/// Consume `consumer` until `shutdown`, each message through `inbox` before
/// it is acknowledged, and run the dead letters an operator asked to replay.
/// A handler error is retried by the consumer's
/// [`RetryPolicy`](postbox::RetryPolicy) before any later message, then the
/// message is kept as a dead letter and acknowledged; a database outage is
/// retried inside the inbox loop.
pub async fn inbox_consumer<H: Handler>(
    inbox: &InboxConsumer,
    consumer: &async_nats::jetstream::consumer::PullConsumer,
    handler: &H,
    shutdown: CancellationToken,
) -> Result<(), BoxError> {
    // An unmigrated schema is refused here, not at the first message.
    inbox.check().await?;
    let messages = consumer.messages().await?;
    tokio::select! {
        done = receive(inbox, messages, handler, &shutdown) => done,
        () = inbox.serve_replays(handler, &shutdown) => Ok(()),
    }
}

async fn receive<H: Handler>(
    inbox: &InboxConsumer,
    mut messages: async_nats::jetstream::consumer::pull::Stream,
    handler: &H,
    shutdown: &CancellationToken,
) -> Result<(), BoxError> {
    loop {
        let raw = tokio::select! {
            _ = shutdown.cancelled() => return Ok(()),
            m = messages.next() => match m {
                Some(m) => m?,
                None => return Err("the JetStream consumer's message stream ended".into()),
            },
        };
        let msg = message(&raw);
        if inbox
            .process_in_place(&msg, handler, shutdown)
            .await
            .is_none()
        {
            return Ok(());
        }
        // Only now: the effect is committed, so a redelivery would be skipped.
        raw.ack().await?;
    }
}
