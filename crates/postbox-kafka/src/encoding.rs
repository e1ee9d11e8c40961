//! An outbox event as a Kafka record: the value (payload or envelope) and
//! the headers, or a refusal of what Kafka would not take.

use crate::config::ValueFormat;
use crate::{KafkaConfig, HEADER_EVENT, HEADER_EVENT_ID};
use postbox_relay::{OutboxEvent, SinkError};
use rdkafka::message::{Header, OwnedHeaders};

/// One event as a Kafka record: its topic and value (the key and headers
/// are the row's, set when it is produced).
#[derive(Debug)]
pub struct Outgoing {
    pub(crate) topic: String,
    pub(crate) value: Vec<u8>,
}

/// The record, refused with the fix when its topic cannot be named or it is
/// over `message.max.bytes`.
pub(crate) fn record(config: &KafkaConfig, e: &OutboxEvent) -> Result<Outgoing, SinkError> {
    let topic = config.topic_for(&e.topic)?;
    let value = match config.value {
        ValueFormat::Payload => serde_json::to_vec(&e.payload),
        ValueFormat::Envelope => serde_json::to_vec(&e.envelope()),
    }
    .expect("JSON values serialise");
    let max = config.max_message_bytes();
    if value.len() > max {
        return Err(SinkError::rejected(format!(
            "message value is {} bytes, over message.max.bytes ({max})",
            value.len()
        )));
    }
    Ok(Outgoing { topic, value })
}

/// `postbox-event-id`, `postbox-event`, then the row's headers (`traceparent`…).
pub(crate) fn headers(e: &OutboxEvent) -> OwnedHeaders {
    let id = e.event_id.to_string();
    let mut h = OwnedHeaders::new()
        .insert(Header {
            key: HEADER_EVENT_ID,
            value: Some(id.as_bytes()),
        })
        .insert(Header {
            key: HEADER_EVENT,
            value: Some(e.event.as_bytes()),
        });
    for (k, text) in postbox_relay::headers::forwarded(e) {
        h = h.insert(Header {
            key: k,
            value: Some(text.as_bytes()),
        });
    }
    h
}
