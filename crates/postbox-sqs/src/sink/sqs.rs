//! The SQS sink: `SendMessageBatch` per queue.

use super::{call_failed, encode, endpoint, send_batches, BatchAnswer, Outgoing};
use crate::config::SqsConfig;
use postbox_relay::cloudevents::CloudEvents;
use postbox_relay::{Encoded, OutboxEvent, Reconnecting, Sink, SinkError};

/// Sends outbox events to SQS queues.
pub struct SqsSink {
    config: SqsConfig,
    client: Reconnecting<aws_sdk_sqs::Client>,
    /// `format = "cloudevents"`: the writer (set by the relay's config).
    cloudevents: Option<CloudEvents>,
}

impl SqsSink {
    /// The sink; the AWS configuration is loaded on first use.
    pub fn new(config: SqsConfig) -> Result<Self, postbox_relay::ConfigError> {
        config.validate()?;
        Ok(SqsSink {
            config,
            client: Reconnecting::new(),
            cloudevents: None,
        })
    }

    /// Write CloudEvents (`format = "cloudevents"`), or postbox's format
    /// with `None` (what [`new`](Self::new) does).
    pub fn with_cloudevents(mut self, writer: Option<CloudEvents>) -> Self {
        self.cloudevents = writer;
        self
    }

    async fn client(&self) -> aws_sdk_sqs::Client {
        let (region, endpoint) = (&self.config.region, &self.config.endpoint_url);
        let make = aws_sdk_sqs::Client::new;
        crate::client::held(&self.client, region.as_deref(), endpoint.as_deref(), make).await
    }
}

#[async_trait::async_trait]
impl Sink for SqsSink {
    type Message = Outgoing;

    fn name(&self) -> &'static str {
        "sqs"
    }

    fn encode(&self, e: &OutboxEvent) -> Result<Outgoing, SinkError> {
        encode(
            e,
            self.config.queue_for(&e.topic)?,
            self.cloudevents.as_ref(),
        )
    }

    async fn send_wave(&self, wave: Vec<Encoded<'_, Outgoing>>) -> Vec<Result<(), SinkError>> {
        use aws_sdk_sqs::types::{MessageAttributeValue, SendMessageBatchRequestEntry};
        let client = &self.client().await;
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

    async fn reset(&self) {
        self.client.reset().await;
    }

    /// The queue's attributes when `queue_url` names one queue (a missing
    /// queue or a refused credential shows here), else any answer from the
    /// service to `ListQueues`.
    async fn check(&self) -> Result<(), SinkError> {
        let client = &self.client().await;
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
