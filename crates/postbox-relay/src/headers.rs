//! The row's `headers` as every sink forwards them, one rule for all.
//!
//! Producers writing plain SQL are not checked at enqueue time, so the relay
//! decides: a `traceparent` that is not W3C-valid is dropped (with its
//! `tracestate`), counted in `postbox_invalid_trace_headers_total` and
//! warned about once per schema and topic; the event itself is delivered,
//! never dead-lettered for its trace. Other values are forwarded as text:
//! strings as they are, anything else as its JSON (`42` → `"42"`,
//! `{"a":1}` → `"{\"a\":1}"`). A `headers` value that is not an object
//! forwards nothing (and warns like a bad trace).

use crate::OutboxEvent;
use postbox::trace::{check_traceparent, TRACEPARENT, TRACESTATE};
use postbox::TraceContext;
use serde_json::Value;
use std::collections::HashSet;
use std::sync::Mutex;

/// The row's headers as (name, text) pairs, trace context checked.
pub fn forwarded(e: &OutboxEvent) -> Vec<(&str, String)> {
    let Some(map) = e.headers.as_object() else {
        if !e.headers.is_null() {
            invalid(e, "the headers column is not a JSON object");
        }
        return Vec::new();
    };
    let bad_trace = match map.get(TRACEPARENT) {
        None => false,
        Some(Value::String(tp)) => check_traceparent(tp).is_err(),
        Some(_) => true,
    };
    if bad_trace {
        invalid(e, "its traceparent is not a valid W3C trace parent");
    }
    map.iter()
        .filter(|(k, _)| !(bad_trace && (*k == TRACEPARENT || *k == TRACESTATE)))
        .map(|(k, v)| {
            let text = match v {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            (k.as_str(), text)
        })
        .collect()
}

/// The row's trace context, if it carries a valid one (an invalid one is
/// counted and warned about, as in [`forwarded`]).
pub fn trace_context(e: &OutboxEvent) -> Option<TraceContext> {
    let tc = TraceContext::from_json(&e.headers);
    if tc.is_none() && e.headers.get(TRACEPARENT).is_some() {
        invalid(e, "its traceparent is not a valid W3C trace parent");
    }
    tc
}

fn invalid(e: &OutboxEvent, why: &str) {
    metrics::counter!("postbox_invalid_trace_headers_total", "schema" => e.schema.clone(), "topic" => e.topic.clone()).increment(1);
    static WARNED: Mutex<Option<HashSet<(String, String)>>> = Mutex::new(None);
    let first = WARNED
        .lock()
        .map(|mut w| {
            w.get_or_insert_with(HashSet::new)
                .insert((e.schema.clone(), e.topic.clone()))
        })
        .unwrap_or(false);
    if first {
        tracing::warn!(schema = %e.schema, topic = %e.topic, event_id = %e.event_id, "event delivered without its trace context: {why} (written by a producer that bypassed postbox's checks?); warned once per topic, counted in postbox_invalid_trace_headers_total");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bad_trace_is_dropped_and_other_values_become_text() {
        let mut e = OutboxEvent::for_test(1, None, "t");
        e.headers = serde_json::json!({"traceparent": "garbage", "tracestate": "a=b", "n": 42, "o": {"a": 1}, "s": "x"});
        let mut h = forwarded(&e);
        h.sort();
        assert_eq!(
            h,
            vec![
                ("n", "42".into()),
                ("o", "{\"a\":1}".into()),
                ("s", "x".into())
            ]
        );
        assert!(trace_context(&e).is_none());
        let tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        e.headers = serde_json::json!({"traceparent": tp, "tracestate": "a=b"});
        assert_eq!(forwarded(&e).len(), 2);
        assert_eq!(trace_context(&e).unwrap().traceparent, tp);
        e.headers = serde_json::json!([1, 2]);
        assert!(forwarded(&e).is_empty());
    }
}
