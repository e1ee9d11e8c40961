//! Other producers' CloudEvents: one event written by the official SDKs
//! (npm `cloudevents` 10: HTTP and Kafka; PyPI `cloudevents` 2.2: HTTP,
//! Kafka, AMQP and RabbitMQ), each binding in both content modes, reads
//! through `postbox::cloudevents::read` (what every broker crate's consumer
//! applies) as one message with every attribute.

use crate::node_interop::node;
use crate::support::python;
use postbox::Message;
use serde_json::Value;

const TRACEPARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

#[tokio::test]
async fn events_the_official_sdks_write_read_as_messages() {
    let node_out = node("cloudevents_make.mjs", &[]).await.join("");
    let python_out = python("cloudevents_make.py", &[]).await;
    let mut wires: Vec<Value> = serde_json::from_str(&node_out).unwrap();
    wires.extend(serde_json::from_str::<Vec<Value>>(&python_out).unwrap());
    assert_eq!(wires.len(), 4 + 8, "every writer: {wires:?}");
    for w in &wires {
        let writer = w["writer"].as_str().unwrap();
        let mut m = Message::new("broker-coordinates", "orders");
        for (name, value) in w["headers"].as_object().unwrap() {
            m.headers
                .push((name.clone(), value.as_str().unwrap().to_owned()));
        }
        m.key = w["key"].as_str().map(str::to_owned);
        m.payload = w["body"].as_str().unwrap().as_bytes().to_vec();
        let m = postbox::cloudevents::read(m, w["content_type"].as_str());
        assert_eq!(m.id, "e-1", "{writer}: {m:?}");
        assert_eq!(m.event(), "order.paid", "{writer}");
        assert_eq!(m.key.as_deref(), Some("order-7"), "{writer}");
        let data: Value = m.json().unwrap_or_else(|e| panic!("{writer}: {e} {m:?}"));
        assert_eq!(
            data,
            serde_json::json!({"amount": 42, "note": "é \"%"}),
            "{writer}"
        );
        assert_eq!(m.cloudevent("source"), Some("//shop/orders"), "{writer}");
        assert_eq!(m.cloudevent("subject"), Some("order-7"), "{writer}");
        assert_eq!(m.cloudevent("tenant"), Some("acme corp"), "{writer}");
        assert_eq!(m.cloudevent("specversion"), Some("1.0"), "{writer}");
        let time = m.cloudevent("time").unwrap_or_default();
        assert!(
            time.starts_with("2026-12-07T10:00:00.123"),
            "{writer}: time {time:?}"
        );
        let tc = m
            .trace_context()
            .unwrap_or_else(|| panic!("{writer}: {m:?}"));
        assert_eq!(tc.traceparent, TRACEPARENT, "{writer}");
    }
}
