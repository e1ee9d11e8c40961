//! CloudEvents 1.0 as sinks write them (`format = "cloudevents"`): one
//! mapping of an outbox row to the event's attributes, for every sink; each
//! sink puts them where its binding says (binary mode) or sends the
//! JSON-format event as its body (structured mode).
//!
//! | attribute | from |
//! |---|---|
//! | `id` | the event id |
//! | `source` | `relay.cloudevents_sources` for the schema, else `relay.cloudevents_source`; `{database}` and `{schema}` filled in |
//! | `type` | the event type |
//! | `subject`, `partitionkey` | the key (absent without one) |
//! | `time` | `created_at` (RFC 3339, UTC, microseconds) |
//! | `datacontenttype` | `application/json` |
//! | `traceparent`, `tracestate` | the row's trace context (Distributed Tracing extension) |
//! | extensions | row headers named as CloudEvents attributes may be (`a-z0-9`, at most 20) |
//!
//! Other row headers are not attributes: they travel as the sink's own
//! headers, as with `format = "postbox"`.

use crate::{Config, ConfigError, OutboxEvent, SinkError};
use postbox::trace::{TRACEPARENT, TRACESTATE};
use postbox::wire::{
    CE_CONTENT_TYPE, CE_DATA_CONTENT_TYPE, CE_SPECVERSION, CE_STRUCTURED_CONTENT_TYPE,
};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// How a sink writes an event.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum Format {
    /// postbox's own wire contract (`postbox-*` headers, the payload as body).
    #[default]
    Postbox,
    /// CloudEvents 1.0, in the content mode `cloudevents_mode` names.
    Cloudevents,
}

/// A CloudEvents content mode.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// Attributes in the protocol's headers, the payload as the body.
    #[default]
    Binary,
    /// The whole event as one JSON document (`application/cloudevents+json`).
    Structured,
}

/// Attribute names a row header may not take: the spec's own and the
/// extensions postbox fills.
const RESERVED: [&str; 13] = [
    "specversion",
    "id",
    "source",
    "type",
    "datacontenttype",
    "dataschema",
    "subject",
    "time",
    "data",
    "data_base64",
    "partitionkey",
    TRACEPARENT,
    TRACESTATE,
];

/// The CloudEvents writer of a sink configured with `format = "cloudevents"`.
#[derive(Debug, Clone)]
pub struct CloudEvents {
    mode: Mode,
    source: Sources,
}

/// The `source` of each schema's events: `relay.cloudevents_sources`, else
/// `relay.cloudevents_source`, with `{database}` filled in.
#[derive(Debug, Clone)]
pub struct Sources {
    /// For schemas not named below; `{schema}` is filled in per event.
    pub(crate) default: String,
    /// By schema.
    pub(crate) per_schema: std::collections::BTreeMap<String, String>,
}

impl Sources {
    fn of(&self, schema: &str) -> String {
        let template = self.per_schema.get(schema).unwrap_or(&self.default);
        template.replace("{schema}", schema)
    }
}

impl CloudEvents {
    /// The writer for a sink's `format` and `cloudevents_mode`, or `None` for
    /// postbox's own format.
    pub fn for_sink(
        format: Format,
        mode: Mode,
        relay: &Config,
    ) -> Result<Option<Self>, ConfigError> {
        if format == Format::Postbox {
            return Ok(None);
        }
        Ok(Some(CloudEvents {
            mode,
            source: relay.cloudevents_sources()?,
        }))
    }

    /// Binary or structured.
    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// `e` as a CloudEvent. Refused when its type is empty (CloudEvents
    /// requires one).
    pub fn event<'e>(&self, e: &'e OutboxEvent) -> Result<CloudEvent<'e>, SinkError> {
        if e.event.is_empty() {
            return Err(SinkError::rejected(
                "the event type is empty, and CloudEvents requires a `type`: give the event a name, or use format = \"postbox\"",
            ));
        }
        let at = e
            .created_at
            .to_rfc3339_opts(chrono::SecondsFormat::Micros, true);
        let mut attributes: Vec<(String, String)> = vec![
            ("specversion".into(), CE_SPECVERSION.into()),
            ("id".into(), e.event_id.to_string()),
            ("source".into(), self.source.of(&e.schema)),
            ("type".into(), e.event.clone()),
            ("time".into(), at),
            ("datacontenttype".into(), CE_DATA_CONTENT_TYPE.into()),
        ];
        if let Some(key) = &e.key {
            attributes.push(("subject".into(), key.clone()));
            attributes.push(("partitionkey".into(), key.clone()));
        }
        // The one rule every sink forwards headers by: a malformed trace
        // context is already dropped (and counted once) here.
        let mut headers = Vec::new();
        let mut trace = Vec::new();
        for (name, value) in crate::headers::forwarded(e) {
            if name == TRACEPARENT || name == TRACESTATE {
                trace.push((name.to_owned(), value));
            } else if is_extension_name(name) {
                attributes.push((name.to_owned(), value));
            } else {
                headers.push((name.to_owned(), value));
            }
        }
        trace.sort();
        attributes.extend(trace.iter().cloned());
        Ok(CloudEvent {
            attributes,
            headers,
            trace,
            data: &e.payload,
        })
    }
}

/// An event as a binding with headers puts it on the wire.
#[derive(Debug)]
pub struct Wire {
    /// `content-type` first (`application/json` in binary mode,
    /// `application/cloudevents+json` in structured mode), then the
    /// attributes as `<prefix><name>` (binary mode), then the trace context
    /// under its own names and the row's headers that are no attribute.
    pub headers: Vec<(String, String)>,
    /// The payload (binary mode) or the JSON-format event (structured).
    pub body: Vec<u8>,
}

/// How a binding names and writes attributes as headers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Binding {
    /// HTTP's: `ce-` + the attribute, values percent-encoded beyond
    /// printable ASCII (and space, `"`, `%`). Also NATS's, and postbox's
    /// choice for SQS, SNS and Redis Streams, which have no binding.
    Http,
    /// Kafka's: `ce_` + the attribute, values as UTF-8.
    Kafka,
    /// AMQP's: `cloudEvents:` + the attribute, values as strings.
    Amqp,
}

impl Binding {
    /// The attribute prefix.
    pub fn prefix(self) -> &'static str {
        match self {
            Binding::Http => postbox::wire::CE_PREFIX,
            Binding::Kafka => postbox::wire::CE_PREFIX_KAFKA,
            Binding::Amqp => postbox::wire::CE_PREFIX_AMQP,
        }
    }

    /// A value as a header of this binding carries it.
    pub fn value(self, text: &str) -> String {
        if self != Binding::Http {
            return text.to_owned();
        }
        let mut out = String::with_capacity(text.len());
        for b in text.bytes() {
            if (0x21..=0x7e).contains(&b) && b != b'"' && b != b'%' {
                out.push(b as char);
            } else {
                out.push_str(&format!("%{b:02X}"));
            }
        }
        out
    }
}

impl CloudEvents {
    /// `e` by a binding whose attributes are headers and whose content type
    /// is a `content-type` header (or property: AMQP).
    pub fn wire(&self, e: &OutboxEvent, binding: Binding) -> Result<Wire, SinkError> {
        let event = self.event(e)?;
        let mut headers = Vec::new();
        let body = match self.mode {
            Mode::Binary => {
                headers.push((CE_CONTENT_TYPE.to_owned(), CE_DATA_CONTENT_TYPE.to_owned()));
                let attributes = event.binary(binding.prefix());
                headers.extend(attributes.map(|(n, v)| (n, binding.value(v))));
                event.data()
            }
            Mode::Structured => {
                headers.push((
                    CE_CONTENT_TYPE.to_owned(),
                    CE_STRUCTURED_CONTENT_TYPE.to_owned(),
                ));
                event.structured()
            }
        };
        headers.extend(event.trace().iter().cloned());
        headers.extend(event.headers().iter().cloned());
        Ok(Wire { headers, body })
    }
}

/// Whether a row header can be a CloudEvents extension attribute: a name
/// the spec allows that is not one of its own or postbox's.
pub fn is_extension_name(name: &str) -> bool {
    (1..=20).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
        && !RESERVED.contains(&name)
}

/// One outbox event as a CloudEvent.
#[derive(Debug)]
pub struct CloudEvent<'e> {
    attributes: Vec<(String, String)>,
    headers: Vec<(String, String)>,
    /// `traceparent` (and `tracestate`), also attributes.
    trace: Vec<(String, String)>,
    data: &'e Value,
}

impl CloudEvent<'_> {
    /// Every attribute but `datacontenttype` (the protocol's content type
    /// carries it in binary mode), named with `prefix`.
    pub fn binary<'s>(&'s self, prefix: &'s str) -> impl Iterator<Item = (String, &'s str)> + 's {
        self.attributes
            .iter()
            .filter(|(n, _)| n != "datacontenttype")
            .map(move |(n, v)| (format!("{prefix}{n}"), v.as_str()))
    }

    /// One attribute's value.
    pub fn attribute(&self, name: &str) -> Option<&str> {
        self.attributes
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// The row's headers that are no attribute (not named as one may be):
    /// sent as the protocol's own headers, as in postbox's format.
    pub fn headers(&self) -> &[(String, String)] {
        &self.headers
    }

    /// The trace context (`traceparent`, `tracestate`), which is also among
    /// the attributes: sent under its own names too where the protocol has
    /// headers, for tracing instrumentation that knows nothing of
    /// CloudEvents.
    pub fn trace(&self) -> &[(String, String)] {
        &self.trace
    }

    /// The data (binary mode's body): the payload's JSON text.
    pub fn data(&self) -> Vec<u8> {
        serde_json::to_vec(self.data).expect("JSON values serialise")
    }

    /// The JSON-format event (structured mode's body), written from the
    /// row's payload without copying it first.
    pub fn structured(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("JSON values serialise")
    }

    /// The JSON-format event as a value.
    pub fn to_json(&self) -> Value {
        let mut event = serde_json::Map::new();
        for (n, v) in &self.attributes {
            event.insert(n.clone(), Value::String(v.clone()));
        }
        event.insert("data".into(), self.data.clone());
        Value::Object(event)
    }
}

/// The JSON event format: the attributes as strings, the payload as `data`.
impl Serialize for CloudEvent<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut event = s.serialize_map(Some(self.attributes.len() + 1))?;
        for (name, value) in &self.attributes {
            event.serialize_entry(name, value)?;
        }
        event.serialize_entry("data", self.data)?;
        event.end()
    }
}

/// `template` checked as a CloudEvents `source` (a non-empty URI-reference)
/// and `{database}` filled in; `{schema}` stays for each event's schema.
pub(crate) fn source(template: &str, database: &str) -> Result<String, String> {
    let sample = template
        .replace("{database}", "db")
        .replace("{schema}", "schema");
    if sample.is_empty() {
        return Err(
            "empty: CloudEvents requires a source, e.g. \"//postbox/{database}/{schema}\"".into(),
        );
    }
    if let Some(c) = sample
        .chars()
        .find(|c| c.is_whitespace() || c.is_control() || "\"<>\\^`{|}".contains(*c))
    {
        return Err(format!(
            "{template:?} is not a URI reference ({c:?} is not allowed; the placeholders are {{database}} and {{schema}}), e.g. \"//postbox/{{database}}/{{schema}}\" or \"https://shop.example/orders\""
        ));
    }
    Ok(template.replace("{database}", database))
}

#[cfg(test)]
mod tests;
