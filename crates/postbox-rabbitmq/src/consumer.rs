//! Consumers: each RabbitMQ delivery goes through postbox's inbox loop
//! ([`InboxConsumer`]) and is acknowledged only after the inbox transaction
//! commits (or the message was kept as a dead letter). A consumer that dies
//! in between leaves the delivery unacknowledged; RabbitMQ redelivers it and
//! the inbox skips its effect.
//!
//! Order: deliveries are handled one at a time, in the order the queue gives
//! them, and a failing one is retried in place (never requeued, which would
//! send it behind later messages). Several consumers on one queue would
//! share it without order: give the queue `x-single-active-consumer`
//! (the sink's `declare` does), or one consumer per queue.

use futures::StreamExt;
use lapin::message::Delivery;
use lapin::options::{
    BasicAckOptions, BasicConsumeOptions, BasicQosOptions, ExchangeDeclareOptions,
    QueueBindOptions, QueueDeclareOptions,
};
use lapin::types::{AMQPValue, FieldTable};
use lapin::{Channel, ExchangeKind};
use postbox::{BoxError, Handler, InboxConsumer, Message};
use tokio_util::sync::CancellationToken;

/// Header the relay sets to the event's ordering key.
use postbox::wire::KEY as HEADER_KEY;

/// How a consumer reads its queue.
#[derive(Debug, Clone)]
pub struct ConsumerOptions {
    /// Unacknowledged deliveries RabbitMQ sends ahead (`basic.qos`); they are
    /// still handled one at a time, in order.
    pub prefetch: u16,
    /// The consumer tag (empty: the broker picks one).
    pub consumer_tag: String,
}

impl Default for ConsumerOptions {
    fn default() -> Self {
        ConsumerOptions {
            prefetch: 32,
            consumer_tag: String::new(),
        }
    }
}

/// The delivery as a handler sees it: id = the `message_id` property (the
/// relay sets it to the outbox event id; other producers should too, or the
/// inbox cannot recognise a redelivery), name = the `type` property, key =
/// the `postbox-key` header, payload = the body, every header with a text
/// value. A CloudEvent (AMQP binding, either mode) is read as one
/// ([`postbox::cloudevents::read`]).
pub fn message(queue: &str, d: &Delivery) -> Message {
    let id = d
        .properties
        .message_id()
        .as_ref()
        .map(|m| m.to_string())
        .unwrap_or_else(|| format!("{queue}/{}", d.delivery_tag));
    let mut m = Message::new(id, queue);
    m.event = d.properties.kind().as_ref().map(|k| k.to_string());
    m.payload = d.data.clone();
    if let Some(headers) = d.properties.headers() {
        m.headers = text_headers(headers);
    }
    m.key = m.header(HEADER_KEY).map(str::to_owned);
    m.source = format!(
        "rabbitmq queue {queue} (exchange {:?}, routing key {:?}){}",
        d.exchange.as_str(),
        d.routing_key.as_str(),
        if d.redelivered { ", redelivered" } else { "" }
    );
    // A CloudEvent (`cloudEvents:*` headers, or a structured body) reads as one.
    let content_type = d.properties.content_type().as_ref().map(|c| c.as_str());
    postbox::cloudevents::read(m, content_type)
}

fn text_headers(table: &FieldTable) -> Vec<(String, String)> {
    table
        .inner()
        .iter()
        .filter_map(|(k, v)| {
            let text = match v {
                AMQPValue::LongString(s) => String::from_utf8_lossy(s.as_bytes()).into_owned(),
                AMQPValue::ShortString(s) => s.to_string(),
                _ => return None,
            };
            Some((k.to_string(), text))
        })
        .collect()
}

/// For quick starts (the sink's `declare = true` calls it too): a durable
/// `topic` exchange, a durable queue with `x-single-active-consumer` (so
/// per-key order holds with several consumer instances: one of them gets
/// the deliveries, another takes over when it goes), bound with `#` to
/// everything the exchange routes. Idempotent; a queue declared before with
/// other arguments is a 406 PRECONDITION_FAILED.
pub async fn declare(channel: &Channel, exchange: &str, queue: &str) -> Result<(), lapin::Error> {
    let durable = ExchangeDeclareOptions {
        durable: true,
        ..Default::default()
    };
    channel
        .exchange_declare(
            exchange.into(),
            ExchangeKind::Topic,
            durable,
            FieldTable::default(),
        )
        .await?;
    let mut args = FieldTable::default();
    args.insert("x-single-active-consumer".into(), AMQPValue::Boolean(true));
    let durable = QueueDeclareOptions {
        durable: true,
        ..Default::default()
    };
    channel.queue_declare(queue.into(), durable, args).await?;
    channel
        .queue_bind(
            queue.into(),
            exchange.into(),
            "#".into(),
            QueueBindOptions::default(),
            FieldTable::default(),
        )
        .await
}

/// Consume `queue` on `channel` until `shutdown`, each delivery through
/// `inbox` before it is acknowledged, and run the dead letters an operator
/// asked to replay. A handler error is retried by the consumer's
/// [`RetryPolicy`](postbox::RetryPolicy) before any later delivery, then the
/// message is kept as a dead letter and acknowledged; a database outage is
/// retried inside the inbox loop. On shutdown the delivery in hand stays
/// unacknowledged and comes back once the channel closes.
pub async fn inbox_consumer<H: Handler>(
    inbox: &InboxConsumer,
    channel: &Channel,
    queue: &str,
    handler: &H,
    options: ConsumerOptions,
    shutdown: CancellationToken,
) -> Result<(), BoxError> {
    // An unmigrated schema is refused here, not at the first message.
    inbox.check().await?;
    channel
        .basic_qos(options.prefetch, BasicQosOptions::default())
        .await?;
    let deliveries = channel
        .basic_consume(
            queue.into(),
            options.consumer_tag.as_str().into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await?;
    tokio::select! {
        done = receive(inbox, deliveries, queue, handler, &shutdown) => done,
        () = inbox.serve_replays(handler, &shutdown) => Ok(()),
    }
}

async fn receive<H: Handler>(
    inbox: &InboxConsumer,
    mut deliveries: lapin::Consumer,
    queue: &str,
    handler: &H,
    shutdown: &CancellationToken,
) -> Result<(), BoxError> {
    loop {
        let delivery = tokio::select! {
            _ = shutdown.cancelled() => return Ok(()),
            d = deliveries.next() => match d {
                Some(d) => d?,
                None => return Err(format!("RabbitMQ ended the consumer of queue {queue:?} (queue deleted, or channel closed)").into()),
            },
        };
        let msg = message(queue, &delivery);
        if inbox
            .process_in_place(&msg, handler, shutdown)
            .await
            .is_none()
        {
            return Ok(());
        }
        // Only now: the effect is committed, so a redelivery would be skipped.
        delivery.acker.ack(BasicAckOptions::default()).await?;
    }
}
