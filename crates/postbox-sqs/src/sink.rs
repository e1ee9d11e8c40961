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

use crate::config::{SnsConfig, SqsConfig};
use crate::{ATTR_EVENT, ATTR_EVENT_ID, ATTR_HEADERS, ATTR_KEY, MAX_MESSAGE_BYTES};
use aws_sdk_sqs::error::ProvideErrorMetadata;
use postbox_relay::{Encoded, OutboxEvent, Sink, SinkError};
use std::collections::BTreeMap;

/// One event as an SQS message or SNS notification.
#[derive(Debug)]
pub struct Outgoing {
    target: String,
    body: String,
    /// Set on FIFO queues and topics only.
    group: Option<String>,
    dedup: Option<String>,
    attributes: Vec<(&'static str, String)>,
    /// Body and attributes, as SQS and SNS count them against their limits.
    size: usize,
}

fn encode(e: &OutboxEvent, target: String) -> Result<Outgoing, SinkError> {
    let body = serde_json::to_string(&e.payload)
        .map_err(|err| SinkError::rejected(format!("payload is not serialisable: {err}")))?;
    let mut attributes = vec![
        (ATTR_EVENT_ID, e.event_id.to_string()),
        (ATTR_EVENT, e.event.clone()),
    ];
    if let Some(k) = &e.key {
        attributes.push((ATTR_KEY, k.clone()));
    }
    // The one rule every sink forwards headers by (bad trace context dropped).
    let headers: serde_json::Map<String, serde_json::Value> = postbox_relay::headers::forwarded(e)
        .into_iter()
        .map(|(n, t)| (n.to_owned(), serde_json::Value::String(t)))
        .collect();
    if !headers.is_empty() {
        attributes.push((ATTR_HEADERS, serde_json::Value::Object(headers).to_string()));
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

/// Sends outbox events to SQS queues.
pub struct SqsSink {
    config: SqsConfig,
    client: tokio::sync::OnceCell<aws_sdk_sqs::Client>,
}

impl SqsSink {
    /// The sink; the AWS configuration is loaded on first use.
    pub fn new(config: SqsConfig) -> Result<Self, postbox_relay::ConfigError> {
        config.validate()?;
        Ok(SqsSink {
            config,
            client: tokio::sync::OnceCell::new(),
        })
    }

    async fn client(&self) -> &aws_sdk_sqs::Client {
        self.client
            .get_or_init(|| async {
                let c = crate::sdk_config(
                    self.config.region.as_deref(),
                    self.config.endpoint_url.as_deref(),
                )
                .await;
                aws_sdk_sqs::Client::new(&c)
            })
            .await
    }
}

#[async_trait::async_trait]
impl Sink for SqsSink {
    type Message = Outgoing;

    fn name(&self) -> &'static str {
        "sqs"
    }

    fn encode(&self, e: &OutboxEvent) -> Result<Outgoing, SinkError> {
        encode(e, self.config.queue_for(&e.topic)?)
    }

    async fn send_wave(&self, wave: Vec<Encoded<'_, Outgoing>>) -> Vec<Result<(), SinkError>> {
        use aws_sdk_sqs::types::{MessageAttributeValue, SendMessageBatchRequestEntry};
        let client = self.client().await;
        send_batches(&wave, |queue, batch| async move {
            let entries = batch.iter().map(|(i, m)| {
                let attributes = m
                    .attributes
                    .iter()
                    .map(|(n, v)| {
                        let value = MessageAttributeValue::builder()
                            .data_type("String")
                            .string_value(v)
                            .build()
                            .expect("data type set");
                        (n.to_string(), value)
                    })
                    .collect();
                SendMessageBatchRequestEntry::builder()
                    .id(i.to_string())
                    .message_body(&m.body)
                    .set_message_group_id(m.group.clone())
                    .set_message_deduplication_id(m.dedup.clone())
                    .set_message_attributes(Some(attributes))
                    .build()
                    .expect("id and body set")
            });
            let out = client
                .send_message_batch()
                .queue_url(queue)
                .set_entries(Some(entries.collect()))
                .send()
                .await
                .map_err(|e| call_failed(&e, "queue", queue))?;
            Ok(BatchAnswer {
                delivered: out
                    .successful()
                    .iter()
                    .filter_map(|ok| ok.id().parse().ok())
                    .collect(),
                refused: out
                    .failed()
                    .iter()
                    .filter_map(|f| {
                        let i = f.id().parse().ok()?;
                        Some((
                            i,
                            f.sender_fault(),
                            f.code().to_owned(),
                            f.message().map(str::to_owned),
                        ))
                    })
                    .collect(),
            })
        })
        .await
    }

    async fn reset(&self) {}

    /// The queue's attributes when `queue_url` names one queue (a missing
    /// queue or a refused credential shows here), else any answer from the
    /// service to `ListQueues`.
    async fn check(&self) -> Result<(), SinkError> {
        let client = self.client().await;
        let queue = &self.config.queue_url;
        if !queue.is_empty() && !queue.contains('{') {
            return client
                .get_queue_attributes()
                .queue_url(queue)
                .attribute_names(aws_sdk_sqs::types::QueueAttributeName::QueueArn)
                .send()
                .await
                .map(|_| ())
                .map_err(|e| call_failed(&e, "queue", queue));
        }
        match client.list_queues().max_results(1).send().await {
            Ok(_) | Err(aws_sdk_sqs::error::SdkError::ServiceError(_)) => Ok(()),
            Err(e) => Err(call_failed(
                &e,
                "SQS at",
                endpoint(self.config.endpoint_url.as_deref()),
            )),
        }
    }
}

fn endpoint(url: Option<&str>) -> &str {
    url.unwrap_or("the region's endpoint")
}

/// Sends outbox events to SNS topics.
pub struct SnsSink {
    config: SnsConfig,
    client: tokio::sync::OnceCell<aws_sdk_sns::Client>,
}

impl SnsSink {
    /// The sink; the AWS configuration is loaded on first use.
    pub fn new(config: SnsConfig) -> Result<Self, postbox_relay::ConfigError> {
        config.validate()?;
        Ok(SnsSink {
            config,
            client: tokio::sync::OnceCell::new(),
        })
    }

    async fn client(&self) -> &aws_sdk_sns::Client {
        self.client
            .get_or_init(|| async {
                let c = crate::sdk_config(
                    self.config.region.as_deref(),
                    self.config.endpoint_url.as_deref(),
                )
                .await;
                aws_sdk_sns::Client::new(&c)
            })
            .await
    }
}

#[async_trait::async_trait]
impl Sink for SnsSink {
    type Message = Outgoing;

    fn name(&self) -> &'static str {
        "sns"
    }

    fn encode(&self, e: &OutboxEvent) -> Result<Outgoing, SinkError> {
        encode(e, self.config.arn_for(&e.topic)?)
    }

    async fn send_wave(&self, wave: Vec<Encoded<'_, Outgoing>>) -> Vec<Result<(), SinkError>> {
        use aws_sdk_sns::types::{MessageAttributeValue, PublishBatchRequestEntry};
        let client = self.client().await;
        send_batches(&wave, |topic, batch| async move {
            let entries = batch.iter().map(|(i, m)| {
                let attributes = m
                    .attributes
                    .iter()
                    .map(|(n, v)| {
                        let value = MessageAttributeValue::builder()
                            .data_type("String")
                            .string_value(v)
                            .build()
                            .expect("data type set");
                        (n.to_string(), value)
                    })
                    .collect();
                PublishBatchRequestEntry::builder()
                    .id(i.to_string())
                    .message(&m.body)
                    .set_message_group_id(m.group.clone())
                    .set_message_deduplication_id(m.dedup.clone())
                    .set_message_attributes(Some(attributes))
                    .build()
                    .expect("id and message set")
            });
            let out = client
                .publish_batch()
                .topic_arn(topic)
                .set_publish_batch_request_entries(Some(entries.collect()))
                .send()
                .await
                .map_err(|e| call_failed(&e, "topic", topic))?;
            Ok(BatchAnswer {
                delivered: out
                    .successful()
                    .iter()
                    .filter_map(|ok| ok.id()?.parse().ok())
                    .collect(),
                refused: out
                    .failed()
                    .iter()
                    .filter_map(|f| {
                        let i = f.id().parse().ok()?;
                        Some((
                            i,
                            f.sender_fault(),
                            f.code().to_owned(),
                            f.message().map(str::to_owned),
                        ))
                    })
                    .collect(),
            })
        })
        .await
    }

    async fn reset(&self) {}

    /// The topic's attributes when `topic_arn` names one topic, else any
    /// answer from the service to `ListTopics`.
    async fn check(&self) -> Result<(), SinkError> {
        let client = self.client().await;
        let topic = &self.config.topic_arn;
        if !topic.is_empty() && !topic.contains('{') {
            return client
                .get_topic_attributes()
                .topic_arn(topic)
                .send()
                .await
                .map(|_| ())
                .map_err(|e| call_failed(&e, "topic", topic));
        }
        match client.list_topics().send().await {
            Ok(_) | Err(aws_sdk_sns::error::SdkError::ServiceError(_)) => Ok(()),
            Err(e) => Err(call_failed(
                &e,
                "SNS at",
                endpoint(self.config.endpoint_url.as_deref()),
            )),
        }
    }
}

fn clone(e: &SinkError) -> SinkError {
    match e {
        SinkError::Rejected { message, .. } => SinkError::rejected(message.clone()),
        SinkError::Transient { message, .. } => SinkError::transient(message.clone()),
        SinkError::NotAttempted => SinkError::NotAttempted,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use aws_sdk_sqs::config::http::HttpResponse;
    use aws_sdk_sqs::error::{ConnectorError, ErrorMetadata, SdkError};
    use aws_sdk_sqs::operation::send_message_batch::SendMessageBatchError;
    use aws_sdk_sqs::types::error as sqs;

    fn rejected(e: SinkError) -> bool {
        matches!(e, SinkError::Rejected { .. })
    }

    fn transient(e: SinkError) -> bool {
        matches!(e, SinkError::Transient { .. })
    }

    /// The error metadata the SDK reads from a service's error answer.
    fn meta(code: &str, message: &str) -> ErrorMetadata {
        ErrorMetadata::builder().code(code).message(message).build()
    }

    /// A service error answer, with its HTTP response.
    fn answered<E>(status: u16, e: E) -> SdkError<E> {
        let raw = HttpResponse::new(status.try_into().expect("an HTTP status"), "".into());
        SdkError::service_error(e, raw)
    }

    /// A row with a payload of `bytes` characters.
    fn row(bytes: usize) -> OutboxEvent {
        OutboxEvent {
            id: 1,
            event_id: postbox::sqlx::types::Uuid::new_v4(),
            topic: "orders".into(),
            event: "created".into(),
            key: Some("k".into()),
            payload: serde_json::json!({ "pad": "x".repeat(bytes) }),
            headers: serde_json::json!({}),
            attempts: 0,
            created_at: postbox::sqlx::types::chrono::Utc::now(),
            schema: "s".into(),
        }
    }

    /// Ten messages of 100 KiB go in calls of two (a call over 256 KiB in all
    /// is refused whole); small ones in calls of ten; each message once, in
    /// its wave's order.
    #[test]
    fn batch_calls_stay_within_ten_entries_and_the_total_size() {
        for (bytes, calls) in [(100 * 1024, 5), (100, 3)] {
            let rows: Vec<OutboxEvent> = (0..if bytes > 1000 { 10 } else { 25 })
                .map(|_| row(bytes))
                .collect();
            let wave: Vec<Encoded<'_, Outgoing>> = rows
                .iter()
                .map(|e| Encoded {
                    event: e,
                    message: encode(e, QUEUE.into()).expect("encodes"),
                })
                .collect();
            let got = batches(&wave);
            assert_eq!(got.len(), calls, "{bytes} bytes each");
            for (_, batch) in &got {
                assert!(batch.len() <= 10);
                assert!(batch.iter().map(|(_, m)| m.size).sum::<usize>() <= MAX_MESSAGE_BYTES);
            }
            let order: Vec<usize> = got
                .iter()
                .flat_map(|(_, b)| b.iter().map(|(i, _)| *i))
                .collect();
            assert_eq!(order, (0..rows.len()).collect::<Vec<_>>());
        }
    }

    const QUEUE: &str = "http://localhost:4566/000000000000/orders";
    const TOPIC: &str = "arn:aws:sns:us-east-1:000000000000:orders";

    #[test]
    fn a_missing_queue_is_a_refusal_of_its_events() {
        // The SDK's code for it (SQS's query-compatible code)…
        let code = "AWS.SimpleQueueService.NonExistentQueue";
        let e = answered(
            400,
            SendMessageBatchError::QueueDoesNotExist(
                sqs::QueueDoesNotExist::builder()
                    .message("The specified queue does not exist.")
                    .meta(meta(code, "The specified queue does not exist."))
                    .build(),
            ),
        );
        assert!(rejected(call_failed(&e, "queue", QUEUE)));
        // …and SQS's JSON protocol code, which the SDK leaves unmodelled.
        let e = answered(
            400,
            SendMessageBatchError::generic(meta(
                "QueueDoesNotExist",
                "The specified queue does not exist.",
            )),
        );
        assert!(rejected(call_failed(&e, "queue", QUEUE)));
    }

    #[test]
    fn a_missing_topic_is_a_refusal_of_its_events() {
        use aws_sdk_sns::operation::publish_batch::PublishBatchError;
        let e = answered(
            404,
            PublishBatchError::NotFoundException(
                aws_sdk_sns::types::error::NotFoundException::builder()
                    .message("Topic does not exist")
                    .meta(meta("NotFound", "Topic does not exist"))
                    .build(),
            ),
        );
        assert!(rejected(call_failed(&e, "topic", TOPIC)));
    }

    #[test]
    fn any_other_service_error_is_transient() {
        let errors = [
            answered(
                400,
                SendMessageBatchError::RequestThrottled(
                    sqs::RequestThrottled::builder()
                        .message("Rate exceeded")
                        .meta(meta("RequestThrottled", "Rate exceeded"))
                        .build(),
                ),
            ),
            answered(
                400,
                SendMessageBatchError::generic(meta("ThrottlingException", "Rate exceeded")),
            ),
            answered(
                500,
                SendMessageBatchError::generic(meta("InternalFailure", "internal error")),
            ),
            answered(
                403,
                SendMessageBatchError::generic(meta(
                    "AccessDenied",
                    "not authorized to perform sqs:sendmessage",
                )),
            ),
            answered(
                400,
                SendMessageBatchError::generic(meta(
                    "AWS.SimpleQueueService.BatchRequestTooLong",
                    "Batch requests cannot be longer than 262144 bytes.",
                )),
            ),
        ];
        for e in errors {
            let code = e.code().unwrap_or_default().to_owned();
            assert!(transient(call_failed(&e, "queue", QUEUE)), "{code}");
        }
    }

    #[test]
    fn a_call_without_an_answer_is_transient() {
        let refused = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
        let errors: [SdkError<SendMessageBatchError>; 3] = [
            SdkError::dispatch_failure(ConnectorError::io(refused.into())),
            SdkError::timeout_error("operation timed out after 30s"),
            SdkError::response_error(
                "unexpected end of JSON",
                HttpResponse::new(200.try_into().expect("200"), "{".into()),
            ),
        ];
        for e in errors {
            assert!(transient(call_failed(&e, "queue", QUEUE)), "{e}");
        }
    }

    #[tokio::test]
    async fn an_unreachable_endpoint_is_transient() {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let endpoint = format!("http://127.0.0.1:{port}");
        let shared = crate::sdk_config(Some("us-east-1"), Some(&endpoint)).await;
        let config = aws_sdk_sqs::config::Builder::from(&shared)
            .credentials_provider(aws_sdk_sqs::config::Credentials::new(
                "test", "test", None, None, "test",
            ))
            .retry_config(aws_sdk_sqs::config::retry::RetryConfig::disabled())
            .build();
        let entry = aws_sdk_sqs::types::SendMessageBatchRequestEntry::builder()
            .id("0")
            .message_body("{}")
            .build()
            .expect("id and body set");
        let e = aws_sdk_sqs::Client::from_conf(config)
            .send_message_batch()
            .queue_url(format!("{endpoint}/000000000000/orders"))
            .entries(entry)
            .send()
            .await
            .expect_err("nothing listens on a port just freed");
        assert!(matches!(e, SdkError::DispatchFailure(_)), "{e:?}");
        assert!(transient(call_failed(&e, "queue", QUEUE)));
    }

    #[test]
    fn an_entry_refused_as_the_senders_fault_is_a_refusal_of_that_event() {
        let e = entry_failed(
            true,
            "InvalidParameterValue",
            Some("Message must be shorter than 262144 bytes."),
            QUEUE,
        );
        assert!(rejected(e));
        assert!(rejected(entry_failed(
            true,
            "InvalidMessageContents",
            None,
            QUEUE
        )));
    }

    #[test]
    fn an_entry_refused_as_the_services_fault_is_transient() {
        let e = entry_failed(false, "InternalError", Some("internal error"), QUEUE);
        assert!(transient(e));
        assert!(transient(entry_failed(
            false,
            "ServiceUnavailable",
            None,
            TOPIC
        )));
    }
}
