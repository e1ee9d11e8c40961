//! The wire contract: the names under which every sink carries an event's
//! metadata beside its payload, and every consumer reads them back. Defined
//! once, here; the sink and consumer crates re-export them under their
//! broker's word (`HEADER_…`, `ATTR_…`, `FIELD_…`), and the Node package's
//! `src/wire.ts` is generated from this file (`clients/node/scripts/sql.mjs`,
//! checked by the lint), so the two sides cannot drift apart.

/// Header (Kafka, webhooks) or message attribute (SQS, SNS): the outbox
/// event id, the inbox's message id on the consumer side.
pub const EVENT_ID: &str = "postbox-event-id";
/// Header or message attribute: the event type.
pub const EVENT: &str = "postbox-event";
/// Header or message attribute: the event's ordering key (absent without one).
pub const KEY: &str = "postbox-key";
/// Header (webhooks): the event's topic.
pub const TOPIC: &str = "postbox-topic";
/// Message attribute (SQS, SNS): the row's headers (`traceparent`, …) as one
/// JSON object of strings (SQS allows 10 attributes, so they travel as one).
pub const HEADERS: &str = "postbox-headers";

/// Redis Streams entry field: the outbox event id.
pub const FIELD_ID: &str = "id";
/// Redis Streams entry field: the event type.
pub const FIELD_EVENT: &str = "event";
/// Redis Streams entry field: the ordering key (absent without one).
pub const FIELD_KEY: &str = "key";
/// Redis Streams entry field: the payload, JSON text.
pub const FIELD_PAYLOAD: &str = "payload";
/// Redis Streams entry field: the row's headers as one JSON object of
/// strings (absent when there are none).
pub const FIELD_HEADERS: &str = "headers";

/// Standard Webhooks header: the message id (the outbox event id).
pub const WEBHOOK_ID: &str = "webhook-id";
/// Standard Webhooks header: Unix seconds when it was signed.
pub const WEBHOOK_TIMESTAMP: &str = "webhook-timestamp";
/// Standard Webhooks header: `v1,<base64 HMAC-SHA256>` signatures.
pub const WEBHOOK_SIGNATURE: &str = "webhook-signature";

/// BullMQ job-data field holding the event's key and headers beside the
/// payload's own fields (`{"key": …, "headers": {…}}`, each part only when
/// there is one; the trace context has its own field, `_trace`).
pub const BULLMQ_META_FIELD: &str = "_postbox";
/// Key of the BullMQ meta field: the ordering key.
pub const BULLMQ_META_KEY: &str = "key";
/// Key of the BullMQ meta field: the row's headers (trace context excepted)
/// as one object of strings.
pub const BULLMQ_META_HEADERS: &str = "headers";

/// Envelope field (`value = "envelope"` on Kafka, `body = "envelope"` on
/// webhooks): the outbox event id.
pub const ENVELOPE_ID: &str = "id";
/// Envelope field: the event type.
pub const ENVELOPE_TYPE: &str = "type";
/// Envelope field: the ordering key (`null` without one).
pub const ENVELOPE_KEY: &str = "key";
/// Envelope field: when the producer wrote the event (RFC 3339, UTC).
pub const ENVELOPE_TIMESTAMP: &str = "timestamp";
/// Envelope field: the payload.
pub const ENVELOPE_DATA: &str = "data";

/// CloudEvents (`format = "cloudevents"`): the spec version every event carries.
pub const CE_SPECVERSION: &str = "1.0";
/// CloudEvents binary mode: the attribute prefix of HTTP headers, NATS
/// headers, and (postbox's choice, as no binding exists) SQS and SNS message
/// attributes and Redis Streams fields.
pub const CE_PREFIX: &str = "ce-";
/// CloudEvents binary mode: the attribute prefix of Kafka headers.
pub const CE_PREFIX_KAFKA: &str = "ce_";
/// CloudEvents binary mode: the attribute prefix of AMQP application
/// properties (RabbitMQ headers).
pub const CE_PREFIX_AMQP: &str = "cloudEvents:";
/// CloudEvents binary mode: the other AMQP prefix the binding allows (for
/// JMS), read but never written.
pub const CE_PREFIX_AMQP_JMS: &str = "cloudEvents_";
/// CloudEvents: the header (or field, or attribute) that carries the content
/// type where the protocol has no property of its own for it.
pub const CE_CONTENT_TYPE: &str = "content-type";
/// CloudEvents structured mode: the content type of a message that is one
/// JSON-format event.
pub const CE_STRUCTURED_CONTENT_TYPE: &str = "application/cloudevents+json";
/// CloudEvents: the `datacontenttype` of every event postbox writes (the
/// outbox payload is JSON).
pub const CE_DATA_CONTENT_TYPE: &str = "application/json";

/// The one envelope every sink that offers one writes: the payload with the
/// event's id, type, key and time beside it, in the shape Standard Webhooks
/// recommends (`type`, `timestamp`, `data`) with the id and key added.
pub fn envelope(
    id: &uuid::Uuid,
    event: &str,
    key: Option<&str>,
    timestamp: &str,
    payload: &serde_json::Value,
) -> serde_json::Value {
    serde_json::json!({
        ENVELOPE_ID: id,
        ENVELOPE_TYPE: event,
        ENVELOPE_KEY: key,
        ENVELOPE_TIMESTAMP: timestamp,
        ENVELOPE_DATA: payload,
    })
}
