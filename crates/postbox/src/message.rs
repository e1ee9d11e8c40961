//! The message a consumer's handler sees, whatever the broker it came through.

use crate::TraceContext;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

/// One received message, as every consumer wrapper (BullMQ, Kafka, and each
/// later broker) hands it to a [`Handler`](crate::Handler): the same handler
/// serves any broker, and a message the handler could not process can be kept
/// in the inbox's dead letters and replayed as it was.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Message {
    /// The inbox key: the outbox event id for messages from the postbox relay
    /// (BullMQ job id, Kafka `postbox-event-id` header), else the broker's own
    /// coordinates.
    pub id: String,
    /// Where it came from: the BullMQ queue, the Kafka topic, …
    pub topic: String,
    /// The event type, as the producer's [`Event::new`](crate::Event::new)
    /// named it (the outbox's `event` column), if the broker carried it: the
    /// BullMQ job name, the `postbox-event` header (Kafka, NATS, webhooks),
    /// the Redis Streams field `event`, the AMQP `type` property, the SQS
    /// attribute `postbox-event`. Serialized as `event`; `name`, its name
    /// before 0.2, still reads.
    #[serde(alias = "name")]
    pub event: Option<String>,
    /// The ordering key (Kafka message key), if the broker carries one.
    pub key: Option<String>,
    /// The body as the broker delivered it; JSON for messages from the relay
    /// (read it with [`json`](Message::json)).
    pub payload: Vec<u8>,
    /// Headers (Kafka headers; the trace context the relay carried, as
    /// `traceparent`/`tracestate`, for every broker). In arrival order.
    pub headers: Vec<(String, String)>,
    /// The broker's coordinates, for logs and dead letters (`kafka orders/3@812`,
    /// `bullmq queue orders job 42`).
    pub source: String,
}

impl Message {
    /// A message with an empty body and no headers.
    pub fn new(id: impl Into<String>, topic: impl Into<String>) -> Self {
        Message {
            id: id.into(),
            topic: topic.into(),
            event: None,
            key: None,
            payload: Vec::new(),
            headers: Vec::new(),
            source: String::new(),
        }
    }

    /// The payload parsed as JSON into `T`.
    pub fn json<T: DeserializeOwned>(&self) -> Result<T, serde_json::Error> {
        serde_json::from_slice(&self.payload)
    }

    /// The first header named `name`.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// The W3C trace context the relay carried from the outbox row, for the
    /// handler to continue the producer's trace. `None` when absent or malformed.
    pub fn trace_context(&self) -> Option<TraceContext> {
        let mut tc = TraceContext::new(self.header(crate::trace::TRACEPARENT)?).ok()?;
        tc.tracestate = self.header(crate::trace::TRACESTATE).map(str::to_owned);
        Some(tc)
    }

    /// A CloudEvents attribute (`source`, `time`, `subject`, an extension…)
    /// of a message that came as a CloudEvent, in either content mode
    /// ([`cloudevents::read`](crate::cloudevents::read)).
    pub fn cloudevent(&self, attribute: &str) -> Option<&str> {
        let name = format!("{}{attribute}", crate::wire::CE_PREFIX);
        self.header(&name)
    }

    /// The event type, or `""` when the broker carried none.
    pub fn event(&self) -> &str {
        self.event.as_deref().unwrap_or_default()
    }

    /// The event type, or `""`: the name [`event`](Message::event) had before 0.2.
    #[deprecated(since = "0.2.0", note = "use `Message::event`, the name producers use")]
    pub fn name(&self) -> &str {
        self.event()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_and_json_read_back() {
        let mut m = Message::new("id-1", "orders");
        m.payload = br#"{"n": 3}"#.to_vec();
        m.headers.push((
            "traceparent".into(),
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".into(),
        ));
        let v: serde_json::Value = m.json().unwrap();
        assert_eq!(v["n"], 3);
        assert!(m.trace_context().is_some());
        assert_eq!(m.header("nope"), None);
        assert_eq!(m.event(), "");
    }

    #[test]
    #[allow(deprecated)]
    fn the_event_type_reads_under_its_old_name_too() {
        let old = r#"{"id":"1","topic":"t","name":"order.paid","key":null,"payload":[],"headers":[],"source":""}"#;
        let m: Message = serde_json::from_str(old).unwrap();
        assert_eq!(m.event.as_deref(), Some("order.paid"));
        assert_eq!(m.name(), "order.paid");
        let now = serde_json::to_value(&m).unwrap();
        assert_eq!(now["event"], "order.paid");
        assert!(now.get("name").is_none());
    }
}
