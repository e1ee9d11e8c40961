//! Consumers: SQS messages, long-polled, each through postbox's inbox loop
//! ([`InboxConsumer`]) and deleted only after the inbox transaction commits
//! (or the message was kept as a dead letter). While the handler runs, the
//! message's visibility is extended, so a slow handler is not raced by a
//! redelivery; a consumer that dies leaves the message to reappear after
//! the visibility timeout, and the inbox skips what was already applied.
//!
//! Order: messages are handled one at a time in the order received. On a
//! FIFO queue SQS hands out a message group's messages in order and holds
//! the group while one is in flight; a standard queue keeps no order.

use postbox::{BoxError, Handler, InboxConsumer, Message};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// How a consumer reads its queue.
#[derive(Debug, Clone)]
pub struct ConsumerOptions {
    /// Messages per receive (1 to 10).
    pub max_messages: i32,
    /// Long-polling wait per receive (at most 20 s).
    pub wait: Duration,
    /// Visibility timeout set on receipt and renewed every half of it while
    /// the handler runs.
    pub visibility: Duration,
}

impl Default for ConsumerOptions {
    /// 10 messages a receive, 20 s long polls, 30 s visibility.
    fn default() -> Self {
        ConsumerOptions {
            max_messages: 10,
            wait: Duration::from_secs(20),
            visibility: Duration::from_secs(30),
        }
    }
}

/// The message as a handler sees it: id = the `postbox-event-id` attribute
/// (the relay sets it to the event id; else SQS's message id), topic = the
/// queue URL's last part, name = `postbox-event`, key = `postbox-key` (else
/// the FIFO message group), payload = the body, headers = `postbox-headers`.
pub fn message(queue_url: &str, m: &aws_sdk_sqs::types::Message) -> Message {
    let attr = |name: &str| {
        m.message_attributes()
            .and_then(|a| a.get(name))
            .and_then(|v| v.string_value())
            .map(str::to_owned)
    };
    let system = |name: aws_sdk_sqs::types::MessageSystemAttributeName| {
        m.attributes().and_then(|a| a.get(&name)).cloned()
    };
    let id = attr(crate::ATTR_EVENT_ID)
        .or_else(|| m.message_id().map(str::to_owned))
        .unwrap_or_default();
    let queue = queue_url.rsplit('/').next().unwrap_or(queue_url);
    let mut msg = Message::new(id, queue);
    msg.event = attr(crate::ATTR_EVENT);
    msg.key = attr(crate::ATTR_KEY)
        .or_else(|| system(aws_sdk_sqs::types::MessageSystemAttributeName::MessageGroupId));
    msg.payload = m.body().unwrap_or_default().as_bytes().to_vec();
    if let Some(h) = attr(crate::ATTR_HEADERS) {
        if let Ok(serde_json::Value::Object(map)) = serde_json::from_str(&h) {
            for (name, value) in map {
                if let serde_json::Value::String(text) = value {
                    msg.headers.push((name, text));
                }
            }
        }
    }
    // CloudEvents attributes (`ce-*`, `content-type`) join the headers, and
    // the message is read as the CloudEvent it then carries.
    for (name, value) in m.message_attributes().into_iter().flatten() {
        let ce =
            name.starts_with(postbox::wire::CE_PREFIX) || name == postbox::wire::CE_CONTENT_TYPE;
        if let (true, Some(text)) = (ce, value.string_value()) {
            msg.headers.push((name.clone(), text.to_owned()));
        }
    }
    msg.source = format!(
        "sqs {queue} message {} (receive {})",
        m.message_id().unwrap_or("?"),
        system(aws_sdk_sqs::types::MessageSystemAttributeName::ApproximateReceiveCount)
            .unwrap_or_else(|| "?".into())
    );
    postbox::cloudevents::read(msg, None)
}

/// Consume `queue_url` until `shutdown`, each message through `inbox` before
/// it is deleted, and run the dead letters an operator asked to replay. A
/// handler error is retried by the consumer's
/// [`RetryPolicy`](postbox::RetryPolicy) (keep `visibility` renewals in mind:
/// the message stays invisible meanwhile), then the message is kept as a
/// dead letter and deleted. Returns an error when SQS fails (the caller
/// calls again).
pub async fn inbox_consumer<H: Handler>(
    inbox: &InboxConsumer,
    client: &aws_sdk_sqs::Client,
    queue_url: &str,
    handler: &H,
    options: ConsumerOptions,
    shutdown: CancellationToken,
) -> Result<(), BoxError> {
    // An unmigrated schema is refused here, not at the first message.
    inbox.check().await?;
    tokio::select! {
        done = receive(inbox, client, queue_url, handler, &options, &shutdown) => done,
        () = inbox.serve_replays(handler, &shutdown) => Ok(()),
    }
}

async fn receive<H: Handler>(
    inbox: &InboxConsumer,
    client: &aws_sdk_sqs::Client,
    queue_url: &str,
    handler: &H,
    options: &ConsumerOptions,
    shutdown: &CancellationToken,
) -> Result<(), BoxError> {
    let visibility = options.visibility.as_secs().max(1) as i32;
    loop {
        let call = client
            .receive_message()
            .queue_url(queue_url)
            .max_number_of_messages(options.max_messages.clamp(1, 10))
            .wait_time_seconds(options.wait.as_secs().min(20) as i32)
            .visibility_timeout(visibility)
            .message_attribute_names("All")
            .message_system_attribute_names(aws_sdk_sqs::types::MessageSystemAttributeName::All)
            .send();
        let received = tokio::select! {
            _ = shutdown.cancelled() => return Ok(()),
            r = call => r.map_err(|e| format!("receiving from {queue_url}: {}", aws_sdk_sqs::error::DisplayErrorContext(&e)))?,
        };
        for m in received.messages() {
            let msg = message(queue_url, m);
            let receipt = m.receipt_handle().unwrap_or_default().to_owned();
            // Keep it invisible while the handler runs.
            let renew = async {
                loop {
                    tokio::time::sleep(options.visibility / 2).await;
                    let _ = client
                        .change_message_visibility()
                        .queue_url(queue_url)
                        .receipt_handle(&receipt)
                        .visibility_timeout(visibility)
                        .send()
                        .await;
                }
            };
            let processed = tokio::select! {
                p = inbox.process_in_place(&msg, handler, shutdown) => p,
                () = renew => unreachable!("renews until the message is processed"),
            };
            if processed.is_none() {
                return Ok(());
            }
            // Only now: the effect is committed, so a redelivery would be skipped.
            client
                .delete_message()
                .queue_url(queue_url)
                .receipt_handle(&receipt)
                .send()
                .await
                .map_err(|e| {
                    format!(
                        "deleting from {queue_url}: {}",
                        aws_sdk_sqs::error::DisplayErrorContext(&e)
                    )
                })?;
        }
    }
}
