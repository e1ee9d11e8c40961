//! CloudEvents 1.0 as consumers read them: a message a CloudEvents producer
//! wrote (the relay with `format = "cloudevents"`, or any other producer),
//! in either content mode, becomes the same [`Message`] a handler sees for
//! postbox's own format.
//!
//! Every broker crate's consumer passes what it received through [`read`]:
//! - **structured** mode (content type `application/cloudevents+json`): the
//!   body is one JSON-format event;
//! - **binary** mode: attributes in headers under a binding's prefix (`ce-`
//!   HTTP, NATS, SQS, SNS, Redis Streams; `ce_` Kafka; `cloudEvents:` or
//!   `cloudEvents_` AMQP), the body the data, the content type the protocol's.
//!
//! The message then has: `id` = the event's `id`, `event` = its `type`, `key`
//! = its `partitionkey` (else the broker's key, else its `subject`), the
//! payload = its data, and each attribute as a header `ce-<name>` (read with
//! [`Message::cloudevent`]), with `traceparent`/`tracestate` also under their
//! own names so [`Message::trace_context`] continues the producer's trace.

use crate::wire::{
    CE_CONTENT_TYPE, CE_PREFIX, CE_PREFIX_AMQP, CE_PREFIX_AMQP_JMS, CE_PREFIX_KAFKA,
};
use crate::Message;
use base64::Engine as _;
use serde_json::Value;

/// Attributes by name, as text.
type Attributes = Vec<(String, String)>;

/// The prefixes binary mode gives attributes, in every binding postbox reads.
const PREFIXES: [&str; 4] = [
    CE_PREFIX,
    CE_PREFIX_KAFKA,
    CE_PREFIX_AMQP,
    CE_PREFIX_AMQP_JMS,
];

/// `msg` read as the CloudEvent it carries, if it carries one (unchanged
/// otherwise). `content_type` is the protocol's own content type where it is
/// not among the headers (the AMQP `content-type` property); elsewhere a
/// `content-type` header is used.
///
/// A structured message whose body is not a JSON object with `specversion`,
/// `id` and `type` is left as it came: the handler sees it as is.
pub fn read(mut msg: Message, content_type: Option<&str>) -> Message {
    let content_type = content_type
        .map(str::to_owned)
        .or_else(|| header(&msg, CE_CONTENT_TYPE).map(str::to_owned));
    let structured = content_type.as_deref().is_some_and(|t| {
        t.to_ascii_lowercase()
            .starts_with("application/cloudevents")
    });
    let mut attributes = if structured {
        match structured_event(&msg.payload) {
            Some((attributes, data)) => {
                msg.payload = data;
                attributes
            }
            None => return msg,
        }
    } else {
        let mut attributes = binary_attributes(&msg);
        if !attributes.iter().any(|(n, _)| n == "id") {
            return msg;
        }
        if let Some(t) = &content_type {
            attributes.retain(|(n, _)| n != "datacontenttype");
            attributes.push(("datacontenttype".into(), t.clone()));
        }
        attributes
    };
    // The protocol's own headers stay; the attributes' wire forms and the
    // content type give way to their `ce-<name>` form.
    msg.headers.retain(|(name, _)| {
        !name.eq_ignore_ascii_case(CE_CONTENT_TYPE) && attribute_name(name).is_none()
    });
    // AMQP's binding sends `time` as an AMQP timestamp (milliseconds since
    // the epoch); it reads as the RFC 3339 text the other bindings carry.
    for (name, value) in attributes.iter_mut() {
        if name == "time" && !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()) {
            if let Some(t) = value
                .parse()
                .ok()
                .and_then(chrono::DateTime::<chrono::Utc>::from_timestamp_millis)
            {
                *value = t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
            }
        }
    }
    let get = |name: &str| {
        attributes
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.clone())
    };
    if let Some(id) = get("id") {
        msg.id = id;
    }
    msg.event = get("type").or(msg.event);
    msg.key = get("partitionkey").or(msg.key).or_else(|| get("subject"));
    for name in [crate::trace::TRACEPARENT, crate::trace::TRACESTATE] {
        if let (Some(v), None) = (get(name), header(&msg, name)) {
            msg.headers.push((name.to_owned(), v));
        }
    }
    for (name, value) in attributes {
        msg.headers.push((format!("{CE_PREFIX}{name}"), value));
    }
    msg
}

/// The attribute a header carries in binary mode, by any binding's prefix,
/// and whether its value is percent-encoded (HTTP's `ce-`).
fn attribute_name(header: &str) -> Option<(String, bool)> {
    PREFIXES.iter().find_map(|p| {
        let head = header.get(..p.len())?;
        let rest = &header[p.len()..];
        (head.eq_ignore_ascii_case(p) && !rest.is_empty())
            .then(|| (rest.to_ascii_lowercase(), *p == CE_PREFIX))
    })
}

fn binary_attributes(msg: &Message) -> Attributes {
    msg.headers
        .iter()
        .filter_map(|(name, value)| {
            let (attribute, encoded) = attribute_name(name)?;
            let value = if encoded {
                percent_decoded(value)
            } else {
                value.clone()
            };
            Some((attribute, value))
        })
        .collect()
}

/// `%XX` sequences decoded (as UTF-8, lossily); anything else kept.
fn percent_decoded(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = bytes
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok())
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match (bytes[i], hex) {
            (b'%', Some(b)) => {
                out.push(b);
                i += 3;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A JSON-format event: its attributes as text, and its data as bytes (JSON
/// text, a string's own text for a non-JSON content type, or `data_base64`
/// decoded).
fn structured_event(body: &[u8]) -> Option<(Attributes, Vec<u8>)> {
    let Ok(Value::Object(event)) = serde_json::from_slice::<Value>(body) else {
        return None;
    };
    if !["specversion", "id", "type"]
        .iter()
        .all(|k| event.get(*k).is_some_and(Value::is_string))
    {
        return None;
    }
    let json_data = event
        .get("datacontenttype")
        .and_then(Value::as_str)
        .is_none_or(|t| {
            let t = t.to_ascii_lowercase();
            t.starts_with("application/json") || t.contains("+json") || t.starts_with("text/json")
        });
    let mut data = Vec::new();
    let mut attributes = Vec::new();
    for (name, value) in event {
        match (name.as_str(), value) {
            ("data", Value::String(s)) if !json_data => data = s.into_bytes(),
            ("data", v) => data = serde_json::to_vec(&v).expect("JSON values serialise"),
            ("data_base64", Value::String(s)) => {
                data = base64::engine::general_purpose::STANDARD
                    .decode(s.as_bytes())
                    .ok()?
            }
            (_, Value::String(s)) => attributes.push((name, s)),
            (_, Value::Null) => {}
            (_, other) => attributes.push((name, other.to_string())),
        }
    }
    Some((attributes, data))
}

fn header<'m>(msg: &'m Message, name: &str) -> Option<&'m str> {
    msg.headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_str())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::CE_STRUCTURED_CONTENT_TYPE;

    const TP: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    fn binary(prefix: &str) -> Message {
        let mut m = Message::new("orders/0@7", "orders");
        m.payload = br#"{"n":1}"#.to_vec();
        for (n, v) in [
            ("specversion", "1.0"),
            ("id", "e-1"),
            ("source", "//shop/orders"),
            ("type", "order.paid"),
            ("subject", "order-7"),
            ("traceparent", TP),
        ] {
            m.headers.push((format!("{prefix}{n}"), v.into()));
        }
        m.headers.push(("x-other".into(), "kept".into()));
        m
    }

    #[test]
    fn binary_mode_reads_under_every_bindings_prefix() {
        for prefix in ["ce-", "Ce-", "ce_", "cloudEvents:", "cloudEvents_"] {
            let m = read(binary(prefix), Some("application/json"));
            assert_eq!(m.id, "e-1", "{prefix}");
            assert_eq!(m.event(), "order.paid");
            assert_eq!(m.key.as_deref(), Some("order-7"), "subject as key");
            assert_eq!(m.cloudevent("source"), Some("//shop/orders"));
            assert_eq!(m.cloudevent("datacontenttype"), Some("application/json"));
            assert_eq!(m.header("x-other"), Some("kept"));
            assert!(m.trace_context().is_some());
            assert_eq!(m.json::<Value>().unwrap()["n"], 1);
            let ids = m.headers.iter().filter(|(n, _)| n.ends_with("id")).count();
            assert_eq!(ids, 1, "the wire form gave way to `ce-id`: {m:?}");
        }
    }

    #[test]
    fn structured_mode_reads_the_body_and_its_data() {
        let mut m = Message::new("q/1", "q");
        m.headers
            .push(("content-type".into(), CE_STRUCTURED_CONTENT_TYPE.into()));
        m.payload = serde_json::to_vec(&serde_json::json!({
            "specversion": "1.0", "id": "e-2", "source": "/s", "type": "t",
            "partitionkey": "k", "subject": "other", "time": "2026-12-07T10:00:00Z",
            "datacontenttype": "application/json", "data": {"a": [1, 2]}, "tenant": "acme",
        }))
        .unwrap();
        let m = read(m, None);
        assert_eq!((m.id.as_str(), m.event()), ("e-2", "t"));
        assert_eq!(m.key.as_deref(), Some("k"), "partitionkey before subject");
        assert_eq!(m.json::<Value>().unwrap(), serde_json::json!({"a": [1, 2]}));
        assert_eq!(m.cloudevent("tenant"), Some("acme"));
        assert_eq!(m.header("content-type"), None);

        let mut b64 = Message::new("q/2", "q");
        b64.payload = br#"{"specversion":"1.0","id":"3","source":"/s","type":"t","datacontenttype":"text/plain","data_base64":"aGk="}"#.to_vec();
        assert_eq!(read(b64, Some(CE_STRUCTURED_CONTENT_TYPE)).payload, b"hi");
    }

    #[test]
    fn http_style_values_are_percent_decoded() {
        let mut m = binary("ce-");
        m.headers.push(("ce-tenant".into(), "a%20b%C3%A9%2".into()));
        m.headers.push(("ce_raw".into(), "a%20b".into()));
        let m = read(m, None);
        assert_eq!(m.cloudevent("tenant"), Some("a bé%2"));
        assert_eq!(
            m.cloudevent("raw"),
            Some("a%20b"),
            "Kafka's values are not encoded"
        );
    }

    #[test]
    fn other_messages_pass_unchanged() {
        let mut plain = Message::new("q/1", "q");
        plain.payload = br#"{"id": "x"}"#.to_vec();
        plain
            .headers
            .push(("content-type".into(), "application/json".into()));
        assert_eq!(read(plain.clone(), None), plain);
        let mut bad = plain.clone();
        bad.payload = b"not json".to_vec();
        assert_eq!(read(bad.clone(), Some(CE_STRUCTURED_CONTENT_TYPE)), bad);
        let mut no_id = binary("ce-");
        no_id.headers.retain(|(n, _)| n != "ce-id");
        assert_eq!(read(no_id.clone(), None), no_id);
    }
}
