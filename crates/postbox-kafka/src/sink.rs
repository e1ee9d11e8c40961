//! The relay's Kafka sink: an idempotent producer (`enable.idempotence`,
//! `acks=all`); a row is marked sent only after its delivery report succeeded.
//!
//! Order: events of one key share a Kafka partition (the key is the message
//! key). A batch with a deep key goes as one transaction
//! ([`transactions`](crate::transactions)), visible to `read_committed`
//! consumers all at once or not at all; otherwise the delivery layer sends it
//! in awaited waves. Either way a failed event is never overtaken by a later
//! event of its key, whatever librdkafka does with the failure. This file
//! maps events to records and Kafka errors to transient or rejected.

use crate::config::PublishMode;
use crate::encoding::{self, Outgoing};
use crate::transactions::Transactions;
use crate::KafkaConfig;
use postbox_relay::cloudevents::CloudEvents;
use postbox_relay::{
    Encoded, GroupOutcome, GroupPolicy, OutboxEvent, Reconnecting, Sink, SinkError,
};
use rdkafka::config::ClientConfig;
use rdkafka::error::{KafkaError, RDKafkaErrorCode as C};
use rdkafka::producer::{FutureProducer, FutureRecord, Producer};
use std::time::Duration;

/// Publishes outbox events as Kafka messages.
pub struct KafkaSink {
    config: KafkaConfig,
    client: ClientConfig,
    producer: Reconnecting<FutureProducer>,
    topics: crate::topics::Topics,
    transactions: Transactions,
    cloudevents: Option<CloudEvents>,
}

/// Fewest events of one key for a batch to go as a transaction: its
/// extra round trips (adding partitions, committing) cost more than two waves.
const TRANSACTION_MIN_DEPTH: usize = 3;

impl KafkaSink {
    /// Build the producer (connects lazily, so the relay starts while Kafka
    /// is down). `publish_timeout` is the relay's: the broker aborts a
    /// transaction left open longer than that.
    pub fn new(
        config: KafkaConfig,
        publish_timeout: Duration,
    ) -> Result<Self, postbox_relay::ConfigError> {
        config.validate()?;
        let cc = config.producer_config();
        // Made once here so that a configuration librdkafka refuses stops
        // the start, not the first batch.
        let _: FutureProducer = cc.create().map_err(|e| postbox_relay::ConfigError {
            field: "kafka.properties",
            reason: format!("librdkafka refused the configuration: {e}"),
        })?;
        let transactions =
            Transactions::new(cc.clone(), &config.transactional_id_prefix, publish_timeout);
        Ok(KafkaSink {
            config,
            client: cc,
            producer: Reconnecting::new(),
            topics: Default::default(),
            transactions,
            cloudevents: None,
        })
    }

    /// Write CloudEvents (`format = "cloudevents"`), or postbox's format
    /// with `None` (what [`new`](Self::new) does).
    pub fn with_cloudevents(mut self, writer: Option<CloudEvents>) -> Self {
        self.cloudevents = writer;
        self
    }

    /// The record for one encoded event.
    fn record<'a>(&'a self, m: &'a Encoded<'_, Outgoing>) -> FutureRecord<'a, str, [u8]> {
        let e = m.event;
        let record = FutureRecord::<str, [u8]>::to(&m.message.topic)
            .payload(&m.message.value)
            .headers(m.message.headers.clone());
        match e.key.as_deref() {
            Some(k) => record.key(k),
            None => record,
        }
    }

    /// The producer (librdkafka connects lazily, so the relay starts while
    /// Kafka is down); made afresh after a reset.
    async fn producer(&self) -> Result<FutureProducer, SinkError> {
        self.producer
            .get(|| async {
                self.client.create().map_err(|e| {
                    SinkError::transient(format!("cannot create a Kafka producer: {e}"))
                })
            })
            .await
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
    );
    // Not this event's fault but the relay's rights on the whole cluster
    // (e.g. IdempotentWrite for the idempotent producer): every event would
    // fail alike, so none is dead-lettered; the rows wait for the fix.
    if code == Some(C::ClusterAuthorizationFailed) {
        return SinkError::transient(format!(
            "{context}: {e}: the relay's Kafka principal lacks a cluster permission (the idempotent producer needs IdempotentWrite on the cluster): grant it; events wait meanwhile"
        ));
    }
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
    type Message = Outgoing;

    fn name(&self) -> &'static str {
        "kafka"
    }

    fn encode(&self, e: &OutboxEvent) -> Result<Outgoing, SinkError> {
        encoding::record(&self.config, self.cloudevents.as_ref(), e)
    }

    async fn send_wave(&self, wave: Vec<Encoded<'_, Outgoing>>) -> Vec<Result<(), SinkError>> {
        let producer = match self.producer().await {
            Ok(p) => p,
            Err(e) => return SinkError::unreachable(wave.len(), &e),
        };
        let context = |m: &Encoded<'_, Outgoing>| {
            format!(
                "delivering event {} to {:?}",
                m.event.event_id, m.message.topic
            )
        };
        // A missing topic is refused before librdkafka would wait for it.
        let mut missing = Vec::with_capacity(wave.len());
        for m in &wave {
            let topic = &m.message.topic;
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
                producer
                    .send_result(self.record(m))
                    .map_err(|(err, _)| classify(&err, &context(m)))
            })
            .collect();
        let mut results = Vec::with_capacity(wave.len());
        for (m, sent) in wave.iter().zip(inflight) {
            results.push(match sent {
                Err(err) => Err(err),
                Ok(report) => match report.await {
                    Ok(Ok(_)) => Ok(()),
                    Ok(Err((err, _))) => Err(classify(&err, &context(m))),
                    Err(_) => Err(SinkError::transient("producer dropped the delivery report")),
                },
            });
        }
        results
    }

    fn groups(&self) -> Option<GroupPolicy> {
        (self.config.publish == PublishMode::Transaction && !self.transactions.refused()).then_some(
            GroupPolicy {
                min_key_depth: TRANSACTION_MIN_DEPTH,
            },
        )
    }

    /// The batch as one Kafka transaction. A missing topic or a refused
    /// message sends the batch to waves, which reject the event at fault.
    async fn send_group(&self, group: Vec<Encoded<'_, Outgoing>>) -> GroupOutcome {
        let producer = match self.producer().await {
            Ok(p) => p,
            Err(e) => return GroupOutcome::Failed(e),
        };
        let mut checked: Vec<&str> = Vec::new();
        for m in &group {
            let kafka_topic = m.message.topic.as_str();
            if !checked.contains(&kafka_topic) {
                if self
                    .topics
                    .refusal(&producer, &m.event.topic, kafka_topic)
                    .await
                    .is_some()
                {
                    return GroupOutcome::Unclear;
                }
                checked.push(kafka_topic);
            }
        }
        let records = group.iter().map(|m| self.record(m)).collect();
        self.transactions.send(records).await
    }

    /// Replace the producer after a transient failure. An idempotent producer
    /// whose messages timed out carries sequence state the broker may no
    /// longer accept (seen with a restarted broker: every later message timed
    /// out); a fresh producer gets a fresh producer id. Nothing unsent is lost:
    /// the rows are still in the outbox.
    async fn reset(&self) {
        if let Some(old) = self.producer.reset().await {
            crate::transactions::discard(old);
        }
        self.transactions.clear();
    }

    async fn check(&self) -> Result<(), SinkError> {
        let producer = self.producer().await?;
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A producer whose broker is never reached: librdkafka refuses some
    /// messages itself, before any broker is asked.
    fn offline_producer(settings: &[(&str, &str)]) -> FutureProducer {
        let mut cc = ClientConfig::new();
        cc.set("bootstrap.servers", "127.0.0.1:1");
        for (k, v) in settings {
            cc.set(*k, *v);
        }
        cc.create().expect("a valid configuration")
    }

    #[test]
    fn message_too_large_is_a_refusal_of_that_event() {
        let producer = offline_producer(&[("message.max.bytes", "1000")]);
        let big = vec![b'x'; 2000];
        let Err((e, _)) =
            producer.send_result(FutureRecord::<str, [u8]>::to("t").payload(&big[..]))
        else {
            panic!("librdkafka refuses a message over message.max.bytes");
        };
        assert_eq!(e.rdkafka_error_code(), Some(C::MessageSizeTooLarge), "{e}");
        assert!(classify(&e, "delivering").is_rejected());
        // The broker's answer, when its own limit is the lower one.
        let e = KafkaError::MessageProduction(C::MessageSizeTooLarge);
        assert!(classify(&e, "delivering").is_rejected());
    }

    #[test]
    fn an_invalid_message_is_a_refusal_of_that_event() {
        for code in [C::InvalidMessageSize, C::InvalidMessage, C::InvalidRecord] {
            let e = KafkaError::MessageProduction(code);
            assert!(classify(&e, "delivering").is_rejected(), "{code:?}");
        }
    }

    #[test]
    fn a_missing_or_invalid_topic_is_a_refusal_of_that_event() {
        for code in [C::InvalidTopic, C::UnknownTopic, C::UnknownTopicOrPartition] {
            let e = KafkaError::MessageProduction(code);
            assert!(classify(&e, "delivering").is_rejected(), "{code:?}");
        }
    }

    #[test]
    fn a_refused_topic_authorization_is_a_refusal_of_that_event() {
        let e = KafkaError::MessageProduction(C::TopicAuthorizationFailed);
        assert!(classify(&e, "delivering").is_rejected());
    }

    /// Every event would fail alike: none is dead-lettered, the rows wait
    /// for the grant the message names.
    #[test]
    fn a_refused_cluster_authorization_is_transient_and_names_the_grant() {
        let e = KafkaError::MessageProduction(C::ClusterAuthorizationFailed);
        let class = classify(&e, "delivering");
        let text = class.to_string();
        assert!(
            class.is_transient() && text.contains("IdempotentWrite"),
            "{text}"
        );
    }

    #[test]
    fn the_code_decides_whatever_the_operation_that_failed() {
        let e = KafkaError::MetadataFetch(C::TopicAuthorizationFailed);
        assert!(classify(&e, "Kafka metadata").is_rejected());
        let e = KafkaError::MetadataFetch(C::AllBrokersDown);
        assert!(classify(&e, "Kafka metadata").is_transient());
    }

    #[test]
    fn a_full_local_queue_is_transient() {
        let producer = offline_producer(&[("queue.buffering.max.messages", "1")]);
        let record = || FutureRecord::<str, [u8]>::to("t").payload(&b"{}"[..]);
        let first = producer.send_result(record());
        assert!(first.is_ok(), "the first message is queued");
        let Err((e, _)) = producer.send_result(record()) else {
            panic!("the queue holds one message");
        };
        assert_eq!(e.rdkafka_error_code(), Some(C::QueueFull), "{e}");
        assert!(classify(&e, "delivering").is_transient());
    }

    #[test]
    fn the_broker_or_the_network_failing_is_transient() {
        for code in [
            C::MessageTimedOut,
            C::AllBrokersDown,
            C::BrokerTransportFailure,
            C::LeaderNotAvailable,
            C::NotLeaderForPartition,
            C::RequestTimedOut,
            C::NotEnoughReplicas,
            C::NotEnoughReplicasAfterAppend,
            C::UnknownPartition,
            C::OutOfOrderSequenceNumber,
            C::InvalidProducerEpoch,
        ] {
            let e = KafkaError::MessageProduction(code);
            assert!(classify(&e, "delivering").is_transient(), "{code:?}");
        }
    }

    #[test]
    fn an_error_without_a_code_is_transient() {
        let e = KafkaError::Canceled;
        assert_eq!(e.rdkafka_error_code(), None);
        assert!(classify(&e, "delivering").is_transient());
    }
}
