//! An outbox event as a Kafka record: the value (payload or envelope) and
//! the headers, or a refusal of what Kafka would not take.

use crate::config::{valid_topic, ValueFormat};
use crate::{KafkaConfig, HEADER_EVENT, HEADER_EVENT_ID};
use postbox_relay::{OutboxEvent, SinkError};
use rdkafka::message::{Header, OwnedHeaders};

/// The record's value, refused with the fix when its topic name is invalid
/// or it is over `message.max.bytes`.
pub(crate) fn value(config: &KafkaConfig, e: &OutboxEvent) -> Result<Vec<u8>, SinkError> {
    let topic = config.topic_for(&e.topic);
    if !valid_topic(topic) {
        return Err(SinkError::rejected(format!(
            "{topic:?} is not a valid Kafka topic name"
        )));
    }
    let value = match config.value {
        ValueFormat::Payload => serde_json::to_vec(&e.payload),
        ValueFormat::Envelope => serde_json::to_vec(&serde_json::json!({
            "id": e.event_id,
            "type": e.event,
            "key": e.key,
            "payload": e.payload,
            "occurred_at": e.created_at,
        })),
    }
    .expect("JSON values serialise");
    let max = config.max_message_bytes();
    if value.len() > max {
        return Err(SinkError::rejected(format!(
            "message value is {} bytes, over message.max.bytes ({max})",
            value.len()
        )));
    }
    Ok(value)
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
