//! The SNS sink: `PublishBatch` per topic.

use super::{call_failed, encode, endpoint, send_batches, BatchAnswer, Outgoing};
use crate::config::SnsConfig;
use postbox_relay::cloudevents::CloudEvents;
use postbox_relay::{Encoded, OutboxEvent, Reconnecting, Sink, SinkError};

/// Sends outbox events to SNS topics.
pub struct SnsSink {
    config: SnsConfig,
    client: Reconnecting<aws_sdk_sns::Client>,
    /// `format = "cloudevents"`: the writer (set by the relay's config).
    cloudevents: Option<CloudEvents>,
}

impl SnsSink {
    /// The sink; the AWS configuration is loaded on first use.
    pub fn new(config: SnsConfig) -> Result<Self, postbox_relay::ConfigError> {
        config.validate()?;
        Ok(SnsSink {
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

    async fn client(&self) -> aws_sdk_sns::Client {
        let (region, endpoint) = (&self.config.region, &self.config.endpoint_url);
        let make = aws_sdk_sns::Client::new;
        crate::client::held(&self.client, region.as_deref(), endpoint.as_deref(), make).await
    }
}

#[async_trait::async_trait]
impl Sink for SnsSink {
    type Message = Outgoing;

    fn name(&self) -> &'static str {
        "sns"
    }

    fn encode(&self, e: &OutboxEvent) -> Result<Outgoing, SinkError> {
        encode(e, self.config.arn_for(&e.topic)?, self.cloudevents.as_ref())
    }

    async fn send_wave(&self, wave: Vec<Encoded<'_, Outgoing>>) -> Vec<Result<(), SinkError>> {
        use aws_sdk_sns::types::{MessageAttributeValue, PublishBatchRequestEntry};
        let client = &self.client().await;
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

    async fn reset(&self) {
        self.client.reset().await;
    }

    /// The topic's attributes when `topic_arn` names one topic, else any
    /// answer from the service to `ListTopics`.
    async fn check(&self) -> Result<(), SinkError> {
        let client = &self.client().await;
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
