//! The mapping of a row to a CloudEvent, the bindings' names and values,
//! and the `source` settings.

use super::*;

const TP: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

fn writer() -> CloudEvents {
    let relay = Config {
        database_url: crate::Secret::new("postgres://u@h/shop"),
        schemas: vec!["sales".into(), "billing".into()],
        cloudevents_sources: [("billing".into(), "https://shop.example/{schema}".into())].into(),
        ..Config::default()
    };
    CloudEvents::for_sink(Format::Cloudevents, Mode::Binary, &relay)
        .unwrap()
        .expect("a writer")
}

#[test]
fn a_row_maps_to_every_attribute() {
    let mut e = OutboxEvent::for_test(1, Some("order-7"), "orders");
    e.schema = "sales".into();
    e.payload = serde_json::json!({"amount": 42});
    e.created_at = "2026-12-07T10:00:00.123456789Z".parse().unwrap();
    e.headers = serde_json::json!({"traceparent": TP, "tracestate": "a=b", "tenant": "acme", "X-Num": 42, "id": "mine"});
    let w = writer();
    let ce = w.event(&e).unwrap();
    let json: Value = serde_json::from_slice(&ce.structured()).unwrap();
    assert_eq!(
        json,
        serde_json::json!({
            "specversion": "1.0", "id": e.event_id.to_string(), "source": "//postbox/shop/sales",
            "type": "e", "time": "2026-12-07T10:00:00.123456Z", "datacontenttype": "application/json",
            "subject": "order-7", "partitionkey": "order-7", "traceparent": TP, "tracestate": "a=b",
            "tenant": "acme", "data": {"amount": 42},
        })
    );
    let mut others = ce.headers().to_vec();
    others.sort();
    assert_eq!(
        others,
        vec![("X-Num".into(), "42".into()), ("id".into(), "mine".into())]
    );
    let mut e = e.clone();
    e.schema = "billing".into();
    let billing = w.event(&e).unwrap();
    assert_eq!(
        billing.attribute("source"),
        Some("https://shop.example/billing"),
        "a schema's own source"
    );
    assert_eq!(ce.to_json(), json, "the value and the bytes agree");
    let binary: Vec<(String, &str)> = ce.binary("ce_").collect();
    assert!(binary.contains(&("ce_type".into(), "e")));
    assert!(!binary.iter().any(|(n, _)| n == "ce_datacontenttype"));
    assert_eq!(ce.data(), br#"{"amount":42}"#);
}

#[test]
fn no_key_no_subject_and_an_empty_type_is_refused() {
    let mut e = OutboxEvent::for_test(1, None, "t");
    let w = writer();
    let ce = w.event(&e).unwrap();
    assert_eq!(ce.attribute("subject"), None);
    assert_eq!(ce.attribute("partitionkey"), None);
    e.event.clear();
    let err = w.event(&e).unwrap_err();
    assert!(
        err.is_rejected() && err.to_string().contains("type"),
        "{err}"
    );
}

#[test]
fn a_source_for_a_schema_the_relay_does_not_serve_is_refused() {
    let relay = Config {
        database_url: crate::Secret::new("postgres://h/shop"),
        cloudevents_sources: [("salse".into(), "urn:x".into())].into(),
        ..Config::default()
    };
    let e = relay.cloudevents_sources().unwrap_err().to_string();
    assert!(
        e.contains("cloudevents_sources") && e.contains("\"salse\""),
        "{e}"
    );
    let relay = Config {
        cloudevents_sources: [("postbox".into(), "a b".into())].into(),
        ..relay
    };
    let e = relay.cloudevents_sources().unwrap_err().to_string();
    assert!(
        e.contains("postbox: ") && e.contains("URI reference"),
        "{e}"
    );
}

#[test]
fn the_source_must_be_a_uri_reference() {
    assert_eq!(source("urn:{database}", "d").unwrap(), "urn:d");
    assert!(source("", "d").unwrap_err().contains("empty"));
    assert!(source("//a b/{schema}", "d").unwrap_err().contains("' '"));
    assert!(source("//{db}", "d").unwrap_err().contains("placeholders"));
    assert!(is_extension_name("tenant1") && !is_extension_name("x-num"));
    assert!(!is_extension_name("subject") && !is_extension_name(&"a".repeat(21)));
}

#[test]
fn http_header_values_are_percent_encoded_beyond_printable_ascii() {
    assert_eq!(Binding::Http.value("a b\"c%d/é:"), "a%20b%22c%25d/%C3%A9:");
    assert_eq!(Binding::Kafka.value("a b"), "a b");
}
