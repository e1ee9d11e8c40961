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
use postbox_relay::cloudevents::{Binding, CloudEvents};
use postbox_relay::{Encoded, OutboxEvent, Reconnecting, Sink, SinkError};
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
    context: Reconnecting<jetstream::Context>,
    /// `format = "cloudevents"`: the writer (set by the relay's config).
    cloudevents: Option<CloudEvents>,
}

impl NatsSink {
    /// The sink; it connects on first use, so the relay starts while NATS is down.
    pub fn new(config: NatsConfig) -> Result<Self, postbox_relay::ConfigError> {
        config.validate()?;
        Ok(NatsSink {
            config,
            context: Reconnecting::new(),
            cloudevents: None,
        })
    }

    /// Write CloudEvents (`format = "cloudevents"`), or postbox's format
    /// with `None` (what [`new`](Self::new) does).
    pub fn with_cloudevents(mut self, writer: Option<CloudEvents>) -> Self {
        self.cloudevents = writer;
        self
    }

    async fn context(&self) -> Result<jetstream::Context, SinkError> {
        self.context
            .get_open(
                |js| js.client().connection_state() == State::Connected,
                || self.connect(),
            )
            .await
    }

    async fn connect(&self) -> Result<jetstream::Context, SinkError> {
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
        // Over the stream's own max_msg_size (below the server's max_payload):
        // it can never go as it is, so retrying would hold its key for good.
        PublishErrorKind::Other
            if std::error::Error::source(e)
                .and_then(|s| s.downcast_ref::<jetstream::Error>())
                .is_some_and(|j| {
                    j.error_code() == jetstream::ErrorCode::STREAM_MESSAGE_EXCEEDS_MAXIMUM
                }) =>
        {
            SinkError::rejected(format!(
                "message to {subject:?} is larger than its stream's max_msg_size: raise the stream's limit (`nats stream edit --max-msg-size`) or send a smaller event ({e})"
            ))
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
        let mut headers = HeaderMap::new();
        headers.insert(NATS_MESSAGE_ID, e.event_id.to_string().as_str());
        let payload = if let Some(ce) = &self.cloudevents {
            // The NATS binding: `ce-*` headers and `content-type`, or the
            // JSON event as the body.
            let wire = ce.wire(e, Binding::Http)?;
            for (name, text) in &wire.headers {
                header(&mut headers, name, text)?;
            }
            wire.body
        } else {
            header(&mut headers, HEADER_EVENT, &e.event)?;
            if let Some(key) = &e.key {
                header(&mut headers, HEADER_KEY, key)?;
            }
            // The one rule every sink forwards headers by (bad trace context dropped).
            for (name, text) in postbox_relay::headers::forwarded(e) {
                header(&mut headers, name, &text)?;
            }
            serde_json::to_vec(&e.payload).expect("JSON values serialise")
        };
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
        self.context.reset().await;
    }

    async fn check(&self) -> Result<(), SinkError> {
        self.context().await.map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use jetstream::context::PublishError;
    use std::time::Duration;

    /// A JetStream context whose server is never reached: the client checks
    /// some things itself and times out waiting for the rest.
    async fn offline() -> jetstream::Context {
        let port = postbox_testkit::free_port();
        let client = async_nats::ConnectOptions::new()
            .retry_on_initial_connect()
            .connect(format!("127.0.0.1:{port}"))
            .await
            .expect("connects in the background");
        let mut js = jetstream::new(client);
        js.set_timeout(Duration::from_millis(50));
        js
    }

    /// An error answer of the JetStream API, as the client reads it.
    fn api_error(json: &str) -> jetstream::Error {
        serde_json::from_str(json).expect("a JetStream API error")
    }

    #[test]
    fn no_stream_for_the_subject_is_a_refusal_of_that_event() {
        let e = PublishError::new(PublishErrorKind::StreamNotFound);
        assert!(classify(&e, "orders.1").is_rejected());
    }

    #[tokio::test]
    async fn a_message_over_max_payload_is_a_refusal_of_that_event() {
        let js = offline().await;
        let big = vec![b'x'; 2 * 1024 * 1024];
        let e = js
            .publish("orders.1", big.into())
            .await
            .expect_err("over the default max_payload (1 MiB)");
        assert_eq!(e.kind(), PublishErrorKind::MaxPayloadExceeded, "{e}");
        assert!(classify(&e, "orders.1").is_rejected());
    }

    #[test]
    fn a_failed_expectation_on_the_stream_is_a_refusal_of_that_event() {
        let e = PublishError::with_source(
            PublishErrorKind::WrongLastMessageId,
            api_error(r#"{"code":400,"err_code":10070,"description":"wrong last msg ID: 1"}"#),
        );
        assert!(classify(&e, "orders.1").is_rejected());
        let e = PublishError::with_source(
            PublishErrorKind::WrongLastSequence,
            api_error(r#"{"code":400,"err_code":10071,"description":"wrong last sequence: 7"}"#),
        );
        assert!(classify(&e, "orders.1").is_rejected());
    }

    #[test]
    fn a_message_over_the_streams_max_msg_size_is_a_refusal_of_that_event() {
        let e = PublishError::with_source(
            PublishErrorKind::Other,
            api_error(
                r#"{"code":400,"err_code":10054,"description":"message size exceeds maximum allowed"}"#,
            ),
        );
        let refusal = classify(&e, "orders.1");
        assert!(
            matches!(&refusal, SinkError::Rejected { .. })
                && refusal.to_string().contains("max_msg_size"),
            "{refusal}"
        );
    }

    #[tokio::test]
    async fn a_puback_that_does_not_come_is_transient() {
        let js = offline().await;
        let ack = js
            .publish("orders.1", b"{}".to_vec().into())
            .await
            .expect("the message is queued while the client reconnects");
        let e = ack.await.expect_err("no server answers");
        assert_eq!(e.kind(), PublishErrorKind::TimedOut, "{e}");
        assert!(classify(&e, "orders.1").is_transient());
    }

    #[test]
    fn any_other_publish_error_is_transient() {
        let errors = [
            PublishError::new(PublishErrorKind::BrokenPipe),
            PublishError::new(PublishErrorKind::MaxAckPending),
            PublishError::with_source(
                PublishErrorKind::Other,
                api_error(
                    r#"{"code":503,"err_code":10077,"description":"maximum messages exceeded"}"#,
                ),
            ),
            PublishError::with_source(
                PublishErrorKind::Other,
                api_error(
                    r#"{"code":500,"err_code":10023,"description":"insufficient resources"}"#,
                ),
            ),
        ];
        for e in errors {
            assert!(classify(&e, "orders.1").is_transient(), "{e}");
        }
    }
}
