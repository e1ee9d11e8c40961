//! The relay's SQS and SNS sinks. A wave's events go out in batches of up
//! to 10 per queue or topic (`SendMessageBatch`, `PublishBatch`) and each
//! entry's answer is read on its own: an entry the service refuses as the
//! sender's fault is a rejection, the rest passes. A queue or topic that
//! does not exist is a rejection naming it; throttling, server errors and
//! unreachable endpoints are transient.
//!
//! Order: the delivery layer sends at most one event per key per wave and
//! awaits the wave before the next; on FIFO queues and topics the key is
//! also the message group, so SQS itself keeps the key's order for its
//! consumers, and the event id is the deduplication id.

use crate::{ATTR_EVENT, ATTR_EVENT_ID, ATTR_HEADERS, ATTR_KEY, MAX_MESSAGE_BYTES};
use aws_sdk_sqs::error::ProvideErrorMetadata;
use postbox::wire::{CE_CONTENT_TYPE, CE_DATA_CONTENT_TYPE, CE_PREFIX, CE_STRUCTURED_CONTENT_TYPE};
use postbox_relay::cloudevents::{Binding, CloudEvents, Mode};
use postbox_relay::{Encoded, OutboxEvent, SinkError};
use std::borrow::Cow;
use std::collections::BTreeMap;

/// One event as an SQS message or SNS notification.
#[derive(Debug)]
pub struct Outgoing {
    target: String,
    body: String,
    /// Set on FIFO queues and topics only.
    group: Option<String>,
    dedup: Option<String>,
    attributes: Vec<(Cow<'static, str>, String)>,
    /// Body and attributes, as SQS and SNS count them against their limits.
    size: usize,
}

/// The most message attributes SQS and SNS take.
const MAX_ATTRIBUTES: usize = 10;

fn encode(
    e: &OutboxEvent,
    target: String,
    cloudevents: Option<&CloudEvents>,
) -> Result<Outgoing, SinkError> {
    let mut attributes: Vec<(Cow<'static, str>, String)> = Vec::new();
    let (body, others) = if let Some(ce) = cloudevents {
        // No binding exists for SQS and SNS: the attributes are message
        // attributes named as HTTP names its headers, but `partitionkey`,
        // which the FIFO group carries (SQS takes at most 10 attributes).
        let event = ce.event(e)?;
        let (content_type, body) = match ce.mode() {
            Mode::Binary => {
                let binary = event
                    .binary(CE_PREFIX)
                    .filter(|(n, _)| !n.ends_with("partitionkey"));
                attributes.extend(binary.map(|(n, v)| (n.into(), Binding::Http.value(v))));
                (CE_DATA_CONTENT_TYPE, event.data())
            }
            Mode::Structured => (CE_STRUCTURED_CONTENT_TYPE, event.structured()),
        };
        attributes.insert(0, (CE_CONTENT_TYPE.into(), content_type.to_owned()));
        let body = String::from_utf8(body).expect("JSON is UTF-8");
        (body, event.headers().to_vec())
    } else {
        attributes.push((ATTR_EVENT_ID.into(), e.event_id.to_string()));
        attributes.push((ATTR_EVENT.into(), e.event.clone()));
        if let Some(k) = &e.key {
            attributes.push((ATTR_KEY.into(), k.clone()));
        }
        let body = serde_json::to_string(&e.payload).expect("JSON values serialise");
        // The one rule every sink forwards headers by (bad trace context dropped).
        let others = postbox_relay::headers::forwarded(e)
            .into_iter()
            .map(|(n, t)| (n.to_owned(), t))
            .collect();
        (body, others)
    };
    if !others.is_empty() {
        let headers: serde_json::Map<String, serde_json::Value> = others
            .into_iter()
            .map(|(n, t)| (n, serde_json::Value::String(t)))
            .collect();
        let headers = serde_json::Value::Object(headers).to_string();
        attributes.push((ATTR_HEADERS.into(), headers));
    }
    if attributes.len() > MAX_ATTRIBUTES {
        return Err(SinkError::rejected(format!(
            "the event needs {} message attributes as a CloudEvent in binary mode, and SQS and SNS take at most {MAX_ATTRIBUTES}: set cloudevents_mode = \"structured\", or carry fewer extension headers",
            attributes.len()
        )));
    }
    let size = body.len()
        + attributes
            .iter()
            .map(|(n, v)| n.len() + "String".len() + v.len())
            .sum::<usize>();
    if size > MAX_MESSAGE_BYTES {
        return Err(SinkError::rejected(format!(
            "message is {size} bytes with its attributes; SQS and SNS take at most {MAX_MESSAGE_BYTES} (store the body elsewhere and send a reference)"
        )));
    }
    let fifo = target.ends_with(".fifo");
    Ok(Outgoing {
        group: fifo.then(|| e.key.clone().unwrap_or_else(|| e.topic.clone())),
        dedup: fifo.then(|| e.event_id.to_string()),
        target,
        body,
        attributes,
        size,
    })
}

/// Group a wave's messages by queue or topic, in batch calls of at most 10
/// entries and [`MAX_MESSAGE_BYTES`] in all (the limit a batch call has on
/// its total besides each message's: a call over it is refused whole, and
/// would be sent again for good), remembering each one's place in the wave.
fn batches<'a>(wave: &'a [Encoded<'_, Outgoing>]) -> Vec<(&'a str, Vec<(usize, &'a Outgoing)>)> {
    let mut by_target: BTreeMap<&str, Vec<(usize, &Outgoing)>> = BTreeMap::new();
    for (i, m) in wave.iter().enumerate() {
        by_target
            .entry(&m.message.target)
            .or_default()
            .push((i, &m.message));
    }
    let mut out = Vec::new();
    for (target, messages) in by_target {
        let mut batch: Vec<(usize, &Outgoing)> = Vec::new();
        let mut bytes = 0;
        for (i, m) in messages {
            if !batch.is_empty() && (batch.len() == 10 || bytes + m.size > MAX_MESSAGE_BYTES) {
                out.push((target, std::mem::take(&mut batch)));
                bytes = 0;
            }
            bytes += m.size;
            batch.push((i, m));
        }
        if !batch.is_empty() {
            out.push((target, batch));
        }
    }
    out
}

/// One batch call's answer: the entries delivered, and those refused with
/// (sender's fault, code, message).
struct BatchAnswer {
    delivered: Vec<usize>,
    refused: Vec<(usize, bool, String, Option<String>)>,
}

/// Send a wave as batch calls (at once), each by `call`, and give every
/// message its result.
async fn send_batches<'a, F, Fut>(
    wave: &'a [Encoded<'_, Outgoing>],
    call: F,
) -> Vec<Result<(), SinkError>>
where
    F: Fn(&'a str, Vec<(usize, &'a Outgoing)>) -> Fut,
    Fut: std::future::Future<Output = Result<BatchAnswer, SinkError>>,
{
    let mut results: Vec<Result<(), SinkError>> = (0..wave.len())
        .map(|_| Err(SinkError::NotAttempted))
        .collect();
    let calls = batches(wave).into_iter().map(|(target, batch)| {
        let places: Vec<usize> = batch.iter().map(|(i, _)| *i).collect();
        let answer = call(target, batch);
        async move { (target, places, answer.await) }
    });
    for (target, places, answer) in futures::future::join_all(calls).await {
        match answer {
            Err(e) => {
                for i in places {
                    results[i] = Err(clone(&e));
                }
            }
            Ok(a) => {
                for i in a.delivered {
                    results[i] = Ok(());
                }
                for (i, sender_fault, code, message) in a.refused {
                    results[i] = Err(entry_failed(
                        sender_fault,
                        &code,
                        message.as_deref(),
                        target,
                    ));
                }
            }
        }
    }
    results
}

/// A failed call, for every entry of its batch.
fn call_failed<E: ProvideErrorMetadata + std::error::Error + 'static>(
    e: &aws_sdk_sqs::error::SdkError<E>,
    what: &str,
    target: &str,
) -> SinkError {
    let code = e.code().unwrap_or_default();
    // Dispatch and timeout errors carry no service message; their sources do.
    let text = e
        .message()
        .map(str::to_owned)
        .unwrap_or_else(|| aws_sdk_sqs::error::DisplayErrorContext(e).to_string());
    if code.contains("NonExistentQueue") || code.contains("QueueDoesNotExist") || code == "NotFound"
    {
        SinkError::rejected(format!(
            "{what} {target} does not exist ({code}): create it, or route the topic elsewhere"
        ))
    } else {
        SinkError::transient(format!("{what} {target}: {code} {text}"))
    }
}

fn entry_failed(sender_fault: bool, code: &str, message: Option<&str>, target: &str) -> SinkError {
    let text = format!(
        "{target} refused the message: {code} {}",
        message.unwrap_or_default()
    );
    if sender_fault {
        SinkError::rejected(text)
    } else {
        SinkError::transient(text)
    }
}

fn endpoint(url: Option<&str>) -> &str {
    url.unwrap_or("the region's endpoint")
}

fn clone(e: &SinkError) -> SinkError {
    match e {
        SinkError::Rejected { message, .. } => SinkError::rejected(message.clone()),
        SinkError::Transient { message, .. } => SinkError::transient(message.clone()),
        SinkError::NotAttempted => SinkError::NotAttempted,
    }
}

mod sns;
mod sqs;

pub use sns::SnsSink;
pub use sqs::SqsSink;

#[cfg(test)]
mod tests;
