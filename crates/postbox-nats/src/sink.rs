//! The relay's NATS JetStream sink. Each event goes to its subject with
//! `Nats-Msg-Id` = its event id, and is marked sent only after the stream's
//! PubAck: a relay's re-send inside the stream's duplicate window (2 min by
//! default) is acknowledged as a duplicate and stored once.
//!
//! Order: the delivery layer sends at most one event per key per wave and
//! awaits the wave's PubAcks before the next, so a key's events are stored
//! in outbox order. This file maps events to messages and JetStream answers
//! to delivered, transient or rejected.

use crate::config::NatsConfig;
use crate::{HEADER_EVENT, HEADER_KEY};
use async_nats::connection::State;
use async_nats::header::{HeaderMap, HeaderName, HeaderValue, NATS_MESSAGE_ID};
use async_nats::jetstream::{self, context::PublishErrorKind};
use postbox_relay::{Encoded, OutboxEvent, Sink, SinkError};
use std::str::FromStr;

/// One event as a JetStream message.
#[derive(Debug)]
pub struct Outgoing {
    subject: String,
    headers: HeaderMap,
    payload: Vec<u8>,
}

/// Publishes outbox events to JetStream streams.
pub struct NatsSink {
    config: NatsConfig,
    context: tokio::sync::Mutex<Option<jetstream::Context>>,
}

impl NatsSink {
    /// The sink; it connects on first use, so the relay starts while NATS is down.
    pub fn new(config: NatsConfig) -> Result<Self, postbox_relay::ConfigError> {
        config.validate()?;
        Ok(NatsSink {
            config,
            context: tokio::sync::Mutex::new(None),
        })
    }

    async fn context(&self) -> Result<jetstream::Context, SinkError> {
        let mut held = self.context.lock().await;
        if let Some(js) = held.as_ref() {
            if js.client().connection_state() == State::Connected {
                return Ok(js.clone());
            }
        }
        *held = None;
        let mut options = async_nats::ConnectOptions::new()
            .connection_timeout(self.config.ack_timeout)
            .name("postbox-relay");
        if let Some(path) = &self.config.credentials_file {
            options = options.credentials_file(path).await.map_err(|e| {
                SinkError::rejected(format!(
                    "cannot read nats.credentials_file {}: {e}",
                    path.display()
                ))
            })?;
        }
        let servers = self
            .config
            .servers()
            .map_err(|e| SinkError::rejected(e.to_string()))?;
        let client = options
            .connect(servers)
            .await
            .map_err(|e| SinkError::transient(format!("connecting to {}: {e}", self.config.url)))?;
        let mut js = jetstream::new(client);
        js.set_timeout(self.config.ack_timeout);
        *held = Some(js.clone());
        Ok(js)
    }
}

fn header(headers: &mut HeaderMap, name: &str, value: &str) -> Result<(), SinkError> {
    let n = HeaderName::from_str(name)
        .map_err(|e| SinkError::rejected(format!("header name {name:?}: {e}")))?;
    let v = HeaderValue::from_str(value)
        .map_err(|e| SinkError::rejected(format!("header {name:?}: {e}")))?;
    headers.insert(n, v);
    Ok(())
}

fn classify(e: &jetstream::context::PublishError, subject: &str) -> SinkError {
    match e.kind() {
        PublishErrorKind::StreamNotFound => SinkError::rejected(format!(
            "no JetStream stream captures subject {subject:?}: create one (e.g. `nats stream add --subjects '{subject}'`), or change nats.subject"
        )),
        PublishErrorKind::MaxPayloadExceeded => SinkError::rejected(format!(
            "message to {subject:?} is larger than the server's max_payload: {e}"
        )),
        PublishErrorKind::WrongLastMessageId | PublishErrorKind::WrongLastSequence => {
            SinkError::rejected(format!("stream refused the message to {subject:?}: {e}"))
        }
        _ => SinkError::transient(format!("publishing to {subject:?}: {e}")),
    }
}

#[async_trait::async_trait]
impl Sink for NatsSink {
    type Message = Outgoing;

    fn name(&self) -> &'static str {
        "nats"
    }

    fn encode(&self, e: &OutboxEvent) -> Result<Outgoing, SinkError> {
        let subject = self.config.subject_for(&e.topic, e.key.as_deref())?;
        let payload = serde_json::to_vec(&e.payload)
            .map_err(|err| SinkError::rejected(format!("payload is not serialisable: {err}")))?;
        let mut headers = HeaderMap::new();
        headers.insert(NATS_MESSAGE_ID, e.event_id.to_string().as_str());
        header(&mut headers, HEADER_EVENT, &e.event)?;
        if let Some(key) = &e.key {
            header(&mut headers, HEADER_KEY, key)?;
        }
        // The one rule every sink forwards headers by (bad trace context dropped).
        for (name, text) in postbox_relay::headers::forwarded(e) {
            header(&mut headers, name, &text)?;
        }
        Ok(Outgoing {
            subject,
            headers,
            payload,
        })
    }

    async fn send_wave(&self, wave: Vec<Encoded<'_, Outgoing>>) -> Vec<Result<(), SinkError>> {
        let js = match self.context().await {
            Ok(js) => js,
            Err(e) => return SinkError::unreachable(wave.len(), &e),
        };
        // Publish the whole wave, then await its PubAcks.
        let mut pending = Vec::with_capacity(wave.len());
        for m in &wave {
            let o = &m.message;
            pending.push(
                js.publish_with_headers(
                    o.subject.clone(),
                    o.headers.clone(),
                    o.payload.clone().into(),
                )
                .await
                .map_err(|e| classify(&e, &o.subject)),
            );
        }
        let mut results = Vec::with_capacity(wave.len());
        for (m, sent) in wave.iter().zip(pending) {
            results.push(match sent {
                Err(e) => Err(e),
                Ok(ack) => ack
                    .await
                    .map(|_| ())
                    .map_err(|e| classify(&e, &m.message.subject)),
            });
        }
        results
    }

    /// Drop the connection after a transient failure; the next batch connects afresh.
    async fn reset(&self) {
        *self.context.lock().await = None;
    }

    async fn check(&self) -> Result<(), SinkError> {
        self.context().await.map(|_| ())
    }
}
