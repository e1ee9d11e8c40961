//! An outbox event as a Kafka record: the value (payload, envelope or
//! CloudEvent) and the headers, or a refusal of what Kafka would not take.

use crate::config::ValueFormat;
use crate::{KafkaConfig, HEADER_EVENT, HEADER_EVENT_ID};
use postbox_relay::cloudevents::{Binding, CloudEvents};
use postbox_relay::{OutboxEvent, SinkError};
use rdkafka::message::{Header, OwnedHeaders};

/// One event as a Kafka record: its topic, value and headers (the key is
/// the row's, set when it is produced).
#[derive(Debug)]
pub struct Outgoing {
    pub(crate) topic: String,
    pub(crate) value: Vec<u8>,
    pub(crate) headers: OwnedHeaders,
}

/// The record, refused with the fix when its topic cannot be named or it is
/// over `message.max.bytes`. With a CloudEvents writer, by the Kafka
/// binding: `ce_*` headers and `content-type` (binary), or the JSON event as
/// the value (structured); the key stays the event's (`partitionkey`).
pub(crate) fn record(
    config: &KafkaConfig,
    cloudevents: Option<&CloudEvents>,
    e: &OutboxEvent,
) -> Result<Outgoing, SinkError> {
    let topic = config.topic_for(&e.topic)?;
    let mut headers = Headers(OwnedHeaders::new());
    let value = if let Some(ce) = cloudevents {
        let wire = ce.wire(e, Binding::Kafka)?;
        for (name, text) in &wire.headers {
            headers.add(name, text);
        }
        wire.body
    } else {
        headers.add(HEADER_EVENT_ID, &e.event_id.to_string());
        headers.add(HEADER_EVENT, &e.event);
        for (name, text) in postbox_relay::headers::forwarded(e) {
            headers.add(name, &text);
        }
        match config.value {
            ValueFormat::Payload => serde_json::to_vec(&e.payload),
            ValueFormat::Envelope => serde_json::to_vec(&e.envelope()),
        }
        .expect("JSON values serialise")
    };
    let max = config.max_message_bytes();
    if value.len() > max {
        return Err(SinkError::rejected(format!(
            "message value is {} bytes, over message.max.bytes ({max})",
            value.len()
        )));
    }
    Ok(Outgoing {
        topic,
        value,
        headers: headers.0,
    })
}

struct Headers(OwnedHeaders);

impl Headers {
    fn add(&mut self, key: &str, value: &str) {
        let h = std::mem::replace(&mut self.0, OwnedHeaders::new());
        self.0 = h.insert(Header {
            key,
            value: Some(value.as_bytes()),
        });
    }
}
