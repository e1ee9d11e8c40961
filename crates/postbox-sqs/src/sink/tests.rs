//! The classifiers and the batching, with the SDK's real error values.

use super::*;
use aws_sdk_sqs::config::http::HttpResponse;
use aws_sdk_sqs::error::{ConnectorError, ErrorMetadata, SdkError};
use aws_sdk_sqs::operation::send_message_batch::SendMessageBatchError;
use aws_sdk_sqs::types::error as sqs;

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
                message: encode(e, QUEUE.into(), None).expect("encodes"),
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
    assert!(call_failed(&e, "queue", QUEUE).is_rejected());
    // …and SQS's JSON protocol code, which the SDK leaves unmodelled.
    let e = answered(
        400,
        SendMessageBatchError::generic(meta(
            "QueueDoesNotExist",
            "The specified queue does not exist.",
        )),
    );
    assert!(call_failed(&e, "queue", QUEUE).is_rejected());
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
    assert!(call_failed(&e, "topic", TOPIC).is_rejected());
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
        assert!(call_failed(&e, "queue", QUEUE).is_transient(), "{code}");
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
        assert!(call_failed(&e, "queue", QUEUE).is_transient(), "{e}");
    }
}

#[tokio::test]
async fn an_unreachable_endpoint_is_transient() {
    let port = postbox_testkit::free_port();
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
    assert!(call_failed(&e, "queue", QUEUE).is_transient());
}

#[test]
fn an_entry_refused_as_the_senders_fault_is_a_refusal_of_that_event() {
    let e = entry_failed(
        true,
        "InvalidParameterValue",
        Some("Message must be shorter than 262144 bytes."),
        QUEUE,
    );
    assert!(e.is_rejected());
    assert!(entry_failed(true, "InvalidMessageContents", None, QUEUE).is_rejected());
}

#[test]
fn an_entry_refused_as_the_services_fault_is_transient() {
    let e = entry_failed(false, "InternalError", Some("internal error"), QUEUE);
    assert!(e.is_transient());
    assert!(entry_failed(false, "ServiceUnavailable", None, TOPIC).is_transient());
}

fn cloudevents(mode: Mode) -> CloudEvents {
    let relay = postbox_relay::Config {
        database_url: postbox_relay::Secret::new("postgres://h/shop"),
        ..Default::default()
    };
    let format = postbox_relay::cloudevents::Format::Cloudevents;
    CloudEvents::for_sink(format, mode, &relay)
        .unwrap()
        .expect("a writer")
}

/// Binary mode: `ce-*` attributes and `content-type`, no `partitionkey`
/// (the FIFO group carries the key), the other headers as `postbox-headers`;
/// more than SQS's 10 attributes is a refusal naming structured mode, which
/// takes any number of them.
#[test]
fn cloudevents_attributes_stay_within_ten() {
    let mut e = row(10);
    let tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    e.headers = serde_json::json!({"traceparent": tp, "tracestate": "a=b", "x-a": "1"});
    let m = encode(&e, QUEUE.into(), Some(&cloudevents(Mode::Binary))).unwrap();
    let names: Vec<&str> = m.attributes.iter().map(|(n, _)| n.as_ref()).collect();
    assert_eq!(
        names,
        [
            "content-type",
            "ce-specversion",
            "ce-id",
            "ce-source",
            "ce-type",
            "ce-time",
            "ce-subject",
            "ce-traceparent",
            "ce-tracestate",
            ATTR_HEADERS
        ]
    );
    assert_eq!(m.attributes[3].1, "//postbox/shop/s");
    e.headers["tenant"] = "acme".into();
    let err = encode(&e, QUEUE.into(), Some(&cloudevents(Mode::Binary))).unwrap_err();
    assert!(
        err.is_rejected() && err.to_string().contains("structured"),
        "{err}"
    );
    let m = encode(&e, QUEUE.into(), Some(&cloudevents(Mode::Structured))).unwrap();
    assert_eq!(m.attributes.len(), 2, "content-type and postbox-headers");
    let body: serde_json::Value = serde_json::from_str(&m.body).unwrap();
    assert_eq!(body["tenant"], "acme");
}
