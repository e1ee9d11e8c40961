//! The relay's RabbitMQ sink: publisher confirms on, `mandatory` set,
//! persistent messages. A row is marked sent only after the broker confirmed
//! its message *and* routed it to at least one queue; an unroutable message
//! comes back (`basic.return`) and is a rejection naming the exchange and
//! routing key, never a silent drop.
//!
//! Order: the delivery layer sends at most one event per key per wave and
//! awaits the wave's confirms before the next, so a key's events reach their
//! queue in outbox order. This file maps events to AMQP messages and broker
//! answers to delivered, transient or rejected.

use crate::config::RabbitmqConfig;
use lapin::options::{BasicPublishOptions, ConfirmSelectOptions, ExchangeDeclareOptions};
use lapin::types::{AMQPValue, FieldTable, LongString, ShortString};
use lapin::{
    BasicProperties, Channel, Confirmation, Connection, ConnectionProperties, ExchangeKind,
};
use postbox::wire::CE_CONTENT_TYPE;
use postbox_relay::cloudevents::{Binding, CloudEvents};
use postbox_relay::{Encoded, OutboxEvent, Reconnecting, Sink, SinkError};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Header carrying the event's ordering key (the routing key may be the topic).
pub use postbox::wire::KEY as HEADER_KEY;

/// How long a missing exchange is remembered before it is looked up again.
const MISSING_FOR: Duration = Duration::from_secs(5);

/// One event as an AMQP message.
#[derive(Debug)]
pub struct Outgoing {
    body: Vec<u8>,
    properties: BasicProperties,
}

/// Publishes outbox events to RabbitMQ exchanges.
pub struct RabbitmqSink {
    config: RabbitmqConfig,
    connection: Reconnecting<Arc<Connection>>,
    /// Publishing channels of the current connection no wave uses now. Each
    /// wave publishes on a channel of its own: the broker refuses a message
    /// by closing its channel, and that must cost only that wave.
    idle: std::sync::Mutex<Vec<Channel>>,
    /// Exchanges seen to exist (or declared), and missing ones with when.
    exchanges: std::sync::Mutex<HashMap<String, Option<Instant>>>,
    /// `format = "cloudevents"`: the writer (set by the relay's config).
    cloudevents: Option<CloudEvents>,
}

impl RabbitmqSink {
    /// The sink; it connects on first use, so the relay starts while
    /// RabbitMQ is down.
    pub fn new(config: RabbitmqConfig) -> Result<Self, postbox_relay::ConfigError> {
        config.validate()?;
        Ok(RabbitmqSink {
            config,
            connection: Reconnecting::new(),
            idle: Default::default(),
            exchanges: Default::default(),
            cloudevents: None,
        })
    }

    /// Write CloudEvents (`format = "cloudevents"`), or postbox's format
    /// with `None` (what [`new`](Self::new) does).
    pub fn with_cloudevents(mut self, writer: Option<CloudEvents>) -> Self {
        self.cloudevents = writer;
        self
    }

    /// A publishing channel (confirms on) for one wave, connecting afresh
    /// if needed; give it back with [`RabbitmqSink::put_back`].
    async fn channel(&self) -> Result<(Arc<Connection>, Channel), SinkError> {
        let connection = self
            .connection
            .get_open(|c| c.status().connected(), || self.connect())
            .await?;
        let idle = self.idle.lock().expect("idle channels").pop();
        let channel = match idle.filter(|c| c.status().connected()) {
            Some(channel) => channel,
            None => confirming_channel(&connection).await?,
        };
        Ok((connection, channel))
    }

    async fn connect(&self) -> Result<Arc<Connection>, SinkError> {
        // A new connection may be to a node that restarted and lost (or
        // never had) what was seen before: look each exchange up again, and
        // with `declare` declare it again. The old connection's channels go.
        self.exchanges.lock().expect("exchanges").clear();
        self.idle.lock().expect("idle channels").clear();
        Connection::connect(self.config.url.expose(), ConnectionProperties::default())
            .await
            .map(Arc::new)
            .map_err(|e| unavailable(&e, &format!("connecting to {}", self.config.redacted_url())))
    }

    /// A wave's channel back to the idle ones, if it is still open and of
    /// the current connection.
    async fn put_back(&self, connection: &Arc<Connection>, channel: Channel) {
        if !channel.status().connected() {
            return;
        }
        if let Some(current) = self.connection.current().await {
            if Arc::ptr_eq(&current, connection) {
                self.idle.lock().expect("idle channels").push(channel);
            }
        }
    }

    /// Why events for `exchange` must be refused, if they must: it does not
    /// exist (looked up with a passive declare on a channel of its own, since
    /// a 404 closes the channel it happens on), or declares it when asked to.
    async fn exchange_refusal(
        &self,
        connection: &Connection,
        exchange: &str,
        topic: &str,
    ) -> Result<(), SinkError> {
        match self.exchanges.lock().expect("exchanges").get(exchange) {
            Some(None) => return Ok(()),
            Some(Some(since)) if since.elapsed() < MISSING_FOR => {
                return Err(missing_exchange(exchange))
            }
            _ => {}
        }
        let probe = connection
            .create_channel()
            .await
            .map_err(|e| unavailable(&e, "opening a channel"))?;
        let looked_up = if self.config.declare {
            crate::declare(&probe, exchange, topic).await
        } else {
            let passive = ExchangeDeclareOptions {
                passive: true,
                durable: true,
                ..Default::default()
            };
            probe
                .exchange_declare(
                    exchange.into(),
                    ExchangeKind::Topic,
                    passive,
                    FieldTable::default(),
                )
                .await
        };
        let found = match looked_up {
            Ok(()) => {
                let _ = probe.close(200, "done".into()).await;
                true
            }
            Err(e) if reply_code(&e) == Some(404) => false,
            Err(e) => return Err(classify(&e, &format!("looking up exchange {exchange:?}"))),
        };
        self.exchanges
            .lock()
            .expect("exchanges")
            .insert(exchange.to_owned(), (!found).then(Instant::now));
        if found {
            Ok(())
        } else {
            Err(missing_exchange(exchange))
        }
    }
}

async fn confirming_channel(connection: &Connection) -> Result<Channel, SinkError> {
    let channel = connection
        .create_channel()
        .await
        .map_err(|e| unavailable(&e, "opening a channel"))?;
    channel
        .confirm_select(ConfirmSelectOptions::default())
        .await
        .map_err(|e| unavailable(&e, "enabling publisher confirms"))?;
    Ok(channel)
}

fn missing_exchange(exchange: &str) -> SinkError {
    SinkError::rejected(format!(
        "exchange {exchange:?} does not exist: declare it (or set rabbitmq.declare = true for a quick start), or route the topic elsewhere with rabbitmq.exchange / [rabbitmq.topics]"
    ))
}

/// The broker's reply code, when it closed the channel or connection.
fn reply_code(e: &lapin::Error) -> Option<u16> {
    match e.kind() {
        lapin::ErrorKind::ProtocolError(amqp) => Some(amqp.get_id()),
        _ => None,
    }
}

/// Connecting and opening channels fail for the broker's sake, never an
/// event's: wrong credentials (403), a vhost that is missing or still
/// recovering after a restart (530, 541) are an outage that costs no
/// attempts; the relay's broker check says what is wrong.
fn unavailable(e: &lapin::Error, context: &str) -> SinkError {
    SinkError::transient(format!("{context}: {e}"))
}

/// Refusals of the message itself (404 not found, 403 access refused, 406
/// precondition failed: too large, bad header) are rejections; the rest is
/// the broker or the network.
fn classify(e: &lapin::Error, context: &str) -> SinkError {
    let message = format!("{context}: {e}");
    match reply_code(e) {
        Some(403 | 404 | 406) => SinkError::rejected(message),
        _ => SinkError::transient(message),
    }
}

fn short(s: &str, what: &str) -> Result<ShortString, SinkError> {
    if s.len() > 255 {
        return Err(SinkError::rejected(format!(
            "{what} is {} bytes; AMQP allows 255",
            s.len()
        )));
    }
    Ok(s.into())
}

#[async_trait::async_trait]
impl Sink for RabbitmqSink {
    type Message = Outgoing;

    fn name(&self) -> &'static str {
        "rabbitmq"
    }

    fn encode(&self, e: &OutboxEvent) -> Result<Outgoing, SinkError> {
        let mut headers = FieldTable::default();
        let mut text_header = |name: &str, text: &str| -> Result<(), SinkError> {
            headers.insert(
                short(name, &format!("header name {name:?}"))?,
                AMQPValue::LongString(LongString::from(text)),
            );
            Ok(())
        };
        let mut content_type = "application/json".to_owned();
        let body = if let Some(ce) = &self.cloudevents {
            // The AMQP binding: `cloudEvents:*` application properties (here
            // headers) and the content-type property, or the JSON event as
            // the body.
            let wire = ce.wire(e, Binding::Amqp)?;
            for (name, text) in wire.headers {
                if name == CE_CONTENT_TYPE {
                    content_type = text;
                } else {
                    text_header(&name, &text)?;
                }
            }
            wire.body
        } else {
            // The one rule every sink forwards headers by (bad trace context dropped).
            for (name, text) in postbox_relay::headers::forwarded(e) {
                text_header(name, &text)?;
            }
            if let Some(key) = &e.key {
                text_header(HEADER_KEY, key)?;
            }
            serde_json::to_vec(&e.payload).expect("JSON values serialise")
        };
        if body.len() > self.config.max_message_bytes {
            return Err(SinkError::rejected(format!(
                "message body is {} bytes, more than rabbitmq.max_message_bytes ({}); shrink the event or raise the limit (and the server's max_message_size)",
                body.len(),
                self.config.max_message_bytes
            )));
        }
        let (_, routing_key) = self.config.route(&e.topic, e.key.as_deref());
        short(routing_key, "the routing key (event key or topic)")?;
        let properties = BasicProperties::default()
            .with_message_id(e.event_id.to_string().into())
            .with_type(short(&e.event, "the event name")?)
            .with_timestamp(e.created_at.timestamp().max(0) as u64)
            .with_content_type(content_type.into())
            .with_delivery_mode(2)
            .with_headers(headers);
        Ok(Outgoing { body, properties })
    }

    async fn send_wave(&self, wave: Vec<Encoded<'_, Outgoing>>) -> Vec<Result<(), SinkError>> {
        let (mut results, closed) = self.publish(&wave).await;
        if closed.len() > 1 {
            // The broker refuses a message (406 too large, 404 exchange gone)
            // by closing the channel, and every publish and confirm still
            // outstanding fails with that same close: which message it refused
            // is known only by sending those again one at a time, each on a
            // channel of its own.
            for i in closed {
                let (mut alone, _) = self.publish(std::slice::from_ref(&wave[i])).await;
                results[i] = alone.remove(0);
            }
        }
        results
    }

    /// Drop the connection after a transient failure; the next batch connects afresh.
    async fn reset(&self) {
        self.connection.reset().await;
        self.idle.lock().expect("idle channels").clear();
    }

    async fn check(&self) -> Result<(), SinkError> {
        self.channel().await.map(|_| ())
    }
}

impl RabbitmqSink {
    /// Publish `wave` on one channel and await its confirms: each message's
    /// answer, and which of them failed with a refusal that closed the
    /// channel (a refusal of one of them, not necessarily of each).
    async fn publish(
        &self,
        wave: &[Encoded<'_, Outgoing>],
    ) -> (Vec<Result<(), SinkError>>, Vec<usize>) {
        let (connection, channel) = match self.channel().await {
            Ok(c) => c,
            Err(e) => return (SinkError::unreachable(wave.len(), &e), Vec::new()),
        };
        // Publish the whole wave, then await its confirms.
        let mut pending = Vec::with_capacity(wave.len());
        // Whose publish or confirm failed with a refusal closing the channel.
        let mut closed = Vec::new();
        for (i, m) in wave.iter().enumerate() {
            let (exchange, routing_key) = self.config.route(&m.event.topic, m.event.key.as_deref());
            if let Err(refused) = self
                .exchange_refusal(&connection, exchange, &m.event.topic)
                .await
            {
                pending.push(Err(refused));
                continue;
            }
            let options = BasicPublishOptions {
                mandatory: true,
                ..Default::default()
            };
            let sent = channel
                .basic_publish(
                    exchange.into(),
                    routing_key.into(),
                    options,
                    &m.message.body,
                    m.message.properties.clone(),
                )
                .await;
            let sent = sent.map_err(|e| {
                classify(
                    &e,
                    &format!(
                        "publishing event {} to exchange {exchange:?}",
                        m.event.event_id
                    ),
                )
            });
            if matches!(sent, Err(SinkError::Rejected { .. })) {
                closed.push(i);
            }
            pending.push(sent);
        }
        // Await every confirm first. lapin hands a returned (unroutable)
        // message to whichever confirm completes next, not necessarily its
        // own (acks may cover several messages), so returns are matched to
        // events by their message_id, never by the confirm that carried them.
        let mut answers = Vec::with_capacity(wave.len());
        let mut returned = std::collections::HashSet::new();
        for (i, sent) in pending.into_iter().enumerate() {
            let answer = match sent {
                Err(e) => Err(e),
                Ok(confirm) => {
                    let answer = confirm
                        .await
                        .map_err(|e| classify(&e, "awaiting a confirm"));
                    if matches!(answer, Err(SinkError::Rejected { .. })) {
                        closed.push(i);
                    }
                    answer
                }
            };
            if let Ok(Confirmation::Ack(Some(r)) | Confirmation::Nack(Some(r))) = &answer {
                if let Some(id) = r.delivery.properties.message_id() {
                    returned.insert((id.to_string(), r.reply_code, r.reply_text.to_string()));
                }
            }
            answers.push(answer);
        }
        let mut results = Vec::with_capacity(wave.len());
        for (m, answer) in wave.iter().zip(answers) {
            let (exchange, routing_key) = self.config.route(&m.event.topic, m.event.key.as_deref());
            let id = m.event.event_id.to_string();
            if let Some((_, code, text)) = returned.iter().find(|r| r.0 == id) {
                results.push(Err(SinkError::rejected(format!(
                    "unroutable: exchange {exchange:?} has no queue bound for routing key {routing_key:?} ({code} {text}); bind a queue, or route the topic elsewhere"
                ))));
                continue;
            }
            results.push(match answer {
                Err(e) => Err(e),
                Ok(Confirmation::Ack(_)) => Ok(()),
                Ok(Confirmation::Nack(_)) => Err(SinkError::transient(format!(
                    "RabbitMQ nacked event {} (exchange {exchange:?}): it could not store it",
                    m.event.event_id
                ))),
                Ok(Confirmation::NotRequested) => {
                    Err(SinkError::transient("the channel lost publisher confirms"))
                }
            });
        }
        // A rejection the broker gave by closing the channel (404 on a deleted
        // exchange, 406) took the channel with it; look the exchanges up again.
        if !channel.status().connected() {
            for m in wave {
                let (exchange, _) = self.config.route(&m.event.topic, m.event.key.as_deref());
                self.exchanges.lock().expect("exchanges").remove(exchange);
            }
        }
        self.put_back(&connection, channel).await;
        (results, closed)
    }
}

#[cfg(test)]
mod tests;
