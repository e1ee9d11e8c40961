//! W3C trace context carried by an event: `traceparent` (and `tracestate`) in
//! the outbox row's headers, so a consumer's span continues the producer's trace.
//!
//! The relay forwards it (Kafka headers, BullMQ job data); this module parses
//! and checks it, so the Rust API refuses a malformed value at enqueue time.
//! One written by plain SQL reaches the relay unchecked: the relay drops it
//! and delivers the event (`postbox_relay::headers`).

use serde_json::Value;

/// Header name of the W3C trace parent.
pub const TRACEPARENT: &str = "traceparent";
/// Header name of the W3C trace state.
pub const TRACESTATE: &str = "tracestate";

/// A W3C trace context (<https://www.w3.org/TR/trace-context/>).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceContext {
    /// `version-traceid-parentid-flags`, e.g. `00-4bf9…-00f0…-01`.
    pub traceparent: String,
    /// Vendor-specific state, passed through untouched.
    pub tracestate: Option<String>,
}

impl TraceContext {
    /// A context from a `traceparent` string, checked against the W3C format.
    pub fn new(traceparent: &str) -> Result<Self, InvalidTraceparent> {
        check_traceparent(traceparent)?;
        Ok(TraceContext {
            traceparent: traceparent.to_owned(),
            tracestate: None,
        })
    }

    /// Read `traceparent`/`tracestate` from a JSON object of headers (an outbox
    /// row's `headers`, or the `_trace` object of a BullMQ job's data).
    /// `None` when there is no valid `traceparent`.
    pub fn from_json(headers: &Value) -> Option<Self> {
        let tp = headers.get(TRACEPARENT)?.as_str()?;
        check_traceparent(tp).ok()?;
        Some(TraceContext {
            traceparent: tp.to_owned(),
            tracestate: headers
                .get(TRACESTATE)
                .and_then(Value::as_str)
                .map(str::to_owned),
        })
    }

    /// As a JSON object `{traceparent, tracestate?}`.
    pub fn to_json(&self) -> Value {
        let mut m = serde_json::Map::new();
        m.insert(TRACEPARENT.into(), Value::String(self.traceparent.clone()));
        if let Some(ts) = &self.tracestate {
            m.insert(TRACESTATE.into(), Value::String(ts.clone()));
        }
        Value::Object(m)
    }
}

/// A `traceparent` that is not a W3C trace context: the value and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "traceparent {value:?} is not a W3C trace context ({reason}); expected \
     00-<32 hex trace id>-<16 hex parent id>-<2 hex flags>"
)]
pub struct InvalidTraceparent {
    /// The value refused.
    pub value: String,
    /// Which part is wrong ("bad trace id", ...).
    pub reason: &'static str,
}

/// `version(2 hex)-trace-id(32 hex, not all 0)-parent-id(16 hex, not all 0)-flags(2 hex)`,
/// lower case; version `ff` is forbidden. Later versions may append fields.
pub fn check_traceparent(tp: &str) -> Result<(), InvalidTraceparent> {
    let bad = |reason: &'static str| {
        Err(InvalidTraceparent {
            value: tp.to_owned(),
            reason,
        })
    };
    let parts: Vec<&str> = tp.split('-').collect();
    if parts.len() < 4 {
        return bad("too few fields");
    }
    let hex = |s: &str, n: usize| {
        s.len() == n
            && s.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    };
    let (version, trace_id, parent_id, flags) = (parts[0], parts[1], parts[2], parts[3]);
    if !hex(version, 2) || version == "ff" {
        return bad("bad version");
    }
    if version == "00" && parts.len() != 4 {
        return bad("version 00 has exactly four fields");
    }
    if !hex(trace_id, 32) || trace_id.bytes().all(|b| b == b'0') {
        return bad("bad trace id");
    }
    if !hex(parent_id, 16) || parent_id.bytes().all(|b| b == b'0') {
        return bad("bad parent id");
    }
    if !hex(flags, 2) {
        return bad("bad flags");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const TP: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn accepts_the_w3c_example() {
        assert!(check_traceparent(TP).is_ok());
        assert_eq!(TraceContext::new(TP).unwrap().traceparent, TP);
    }

    #[test]
    fn refuses_malformed_values() {
        for bad in [
            "",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
        ] {
            let err = check_traceparent(bad).unwrap_err();
            assert!(err.to_string().contains("W3C"), "{err}");
        }
        // A future version may carry more fields.
        assert!(check_traceparent(&format!("01{}-more", &TP[2..])).is_ok());
    }

    #[test]
    fn reads_headers() {
        let h = json!({"traceparent": TP, "tracestate": "congo=t61rcWkgMzE", "x": "y"});
        let tc = TraceContext::from_json(&h).unwrap();
        assert_eq!(tc.tracestate.as_deref(), Some("congo=t61rcWkgMzE"));
        assert_eq!(TraceContext::from_json(&tc.to_json()), Some(tc));
        assert_eq!(
            TraceContext::from_json(&json!({"traceparent": "nope"})),
            None
        );
        assert_eq!(TraceContext::from_json(&json!({})), None);
    }
}
