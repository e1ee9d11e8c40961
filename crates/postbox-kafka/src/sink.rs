//! The relay's Kafka sink: an idempotent producer (`enable.idempotence`,
//! `acks=all`); a row is marked sent only after its delivery report succeeded.
//!
//! Order: events of one key share a Kafka partition (the key is the message
//! key), and the delivery layer sends them in awaited waves, so a failed event
//! is never overtaken by a later event of its key, whatever librdkafka does
//! with the failure. This file maps events to records and Kafka errors to
//! transient or rejected.

use crate::{encoding, KafkaConfig};
use postbox_relay::{Encoded, OutboxEvent, Sink, SinkError};
use rdkafka::config::ClientConfig;
use rdkafka::error::{KafkaError, RDKafkaErrorCode as C};
use rdkafka::producer::{FutureProducer, FutureRecord, Producer};
use std::time::Duration;

/// Publishes outbox events as Kafka messages.
pub struct KafkaSink {
    config: KafkaConfig,
    client: ClientConfig,
    producer: std::sync::RwLock<FutureProducer>,
    topics: crate::topics::Topics,
}

impl KafkaSink {
    /// Build the producer (connects lazily, so the relay starts while Kafka is down).
    pub fn new(config: KafkaConfig) -> Result<Self, postbox_relay::ConfigError> {
        config.validate()?;
        let cc = config.producer_config();
        let producer: FutureProducer = cc.create().map_err(|e| postbox_relay::ConfigError {
            field: "kafka.properties",
            reason: format!("librdkafka refused the configuration: {e}"),
        })?;
        Ok(KafkaSink {
            config,
            client: cc,
            producer: std::sync::RwLock::new(producer),
            topics: Default::default(),
        })
    }

    fn producer(&self) -> FutureProducer {
        self.producer.read().expect("producer lock").clone()
    }

    fn renew_producer(&self) {
        match self.client.create::<FutureProducer>() {
            Ok(fresh) => {
                let old =
                    std::mem::replace(&mut *self.producer.write().expect("producer lock"), fresh);
                // Destroying a librdkafka handle may block while it purges: not on the runtime.
                tokio::task::spawn_blocking(move || drop(old));
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot create a new Kafka producer; keeping the old one")
            }
        }
    }
}

/// Poison: errors about the message or topic itself; everything else is the
/// broker or the network, and is retried without counting attempts.
fn classify(e: &KafkaError, context: &str) -> SinkError {
    let code = e.rdkafka_error_code();
    let poison = matches!(
        code,
        Some(C::MessageSizeTooLarge)
            | Some(C::InvalidMessageSize)
            | Some(C::InvalidMessage)
            | Some(C::InvalidRecord)
            | Some(C::InvalidTopic)
            | Some(C::UnknownTopic)
            | Some(C::UnknownTopicOrPartition)
            | Some(C::TopicAuthorizationFailed)
            | Some(C::ClusterAuthorizationFailed)
    );
    let message = format!("{context}: {e}");
    if poison {
        SinkError::rejected(message)
    } else {
        SinkError::transient(message)
    }
}

#[async_trait::async_trait]
impl Sink for KafkaSink {
    /// The record's value.
    type Message = Vec<u8>;

    fn name(&self) -> &'static str {
        "kafka"
    }

    fn encode(&self, e: &OutboxEvent) -> Result<Vec<u8>, SinkError> {
        encoding::value(&self.config, e)
    }

    async fn send_wave(&self, wave: Vec<Encoded<'_, Vec<u8>>>) -> Vec<Result<(), SinkError>> {
        let producer = self.producer();
        let context = |e: &OutboxEvent| {
            format!(
                "delivering event {} to {:?}",
                e.event_id,
                self.config.topic_for(&e.topic)
            )
        };
        // A missing topic is refused before librdkafka would wait for it.
        let mut missing = Vec::with_capacity(wave.len());
        for m in &wave {
            let topic = self.config.topic_for(&m.event.topic);
            missing.push(self.topics.refusal(&producer, &m.event.topic, topic).await);
        }
        // Enqueue the whole wave, then await its delivery reports.
        let inflight: Vec<_> = wave
            .iter()
            .zip(missing)
            .map(|(m, missing)| {
                if let Some(err) = missing {
                    return Err(err);
                }
                let e = m.event;
                let mut record = FutureRecord::<str, [u8]>::to(self.config.topic_for(&e.topic))
                    .payload(&m.message)
                    .headers(encoding::headers(e));
                if let Some(k) = e.key.as_deref() {
                    record = record.key(k);
                }
                producer
                    .send_result(record)
                    .map_err(|(err, _)| classify(&err, &context(e)))
            })
            .collect();
        let mut results = Vec::with_capacity(wave.len());
        for (m, sent) in wave.iter().zip(inflight) {
            results.push(match sent {
                Err(err) => Err(err),
                Ok(report) => match report.await {
                    Ok(Ok(_)) => Ok(()),
                    Ok(Err((err, _))) => Err(classify(&err, &context(m.event))),
                    Err(_) => Err(SinkError::transient("producer dropped the delivery report")),
                },
            });
        }
        results
    }

    /// Replace the producer after a transient failure. An idempotent producer
    /// whose messages timed out carries sequence state the broker may no
    /// longer accept (seen with a restarted broker: every later message timed
    /// out); a fresh producer gets a fresh producer id. Nothing unsent is lost:
    /// the rows are still in the outbox.
    async fn reset(&self) {
        self.renew_producer();
    }

    async fn check(&self) -> Result<(), SinkError> {
        let producer = self.producer();
        tokio::task::spawn_blocking(move || {
            producer
                .client()
                .fetch_metadata(None, Duration::from_secs(2))
        })
        .await
        .map_err(|e| SinkError::transient(e.to_string()))?
        .map(|_| ())
        .map_err(|e| classify(&e, "Kafka metadata"))
    }
}
