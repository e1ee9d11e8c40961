//! The relay's Kafka sink: an idempotent producer (`enable.idempotence`,
//! `acks=all`); a row is marked sent only after its delivery report succeeded.
//!
//! Order: events of one key share a Kafka partition (the key is the message
//! key). The batch is produced in waves of one event per key, each wave
//! awaited, so a failed event can never be overtaken by a later event of its
//! key, whatever librdkafka does with the failure.

use crate::config::{valid_topic, ValueFormat};
use crate::{KafkaConfig, HEADER_EVENT, HEADER_EVENT_ID};
use postbox_relay::{waves, Delivery, OutboxEvent, Sink, SinkError};
use rdkafka::config::ClientConfig;
use rdkafka::error::{KafkaError, RDKafkaErrorCode as C};
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord, Producer};
use std::collections::HashSet;
use std::time::Duration;

/// Publishes outbox events as Kafka messages.
pub struct KafkaSink {
    config: KafkaConfig,
    client: ClientConfig,
    producer: std::sync::RwLock<FutureProducer>,
    max_message_bytes: usize,
}

impl KafkaSink {
    /// Build the producer (connects lazily, so the relay starts while Kafka is down).
    pub fn new(config: KafkaConfig) -> Result<Self, postbox_relay::ConfigError> {
        config.validate()?;
        let mut cc = ClientConfig::new();
        cc.set("bootstrap.servers", &config.brokers)
            .set("enable.idempotence", "true")
            .set("acks", "all")
            // Idempotence keeps order with up to 5 requests in flight per connection.
            .set("max.in.flight.requests.per.connection", "5")
            .set("message.timeout.ms", config.message_timeout_ms.to_string())
            .set("linger.ms", "0")
            .set("allow.auto.create.topics", "false");
        for (k, v) in &config.properties {
            cc.set(k, v);
        }
        let max_message_bytes = config
            .properties
            .get("message.max.bytes")
            .and_then(|v| v.parse().ok())
            .unwrap_or(1_000_000);
        let producer: FutureProducer = cc.create().map_err(|e| postbox_relay::ConfigError {
            field: "kafka.properties",
            reason: format!("librdkafka refused the configuration: {e}"),
        })?;
        Ok(KafkaSink {
            config,
            client: cc,
            producer: std::sync::RwLock::new(producer),
            max_message_bytes,
        })
    }

    fn producer(&self) -> FutureProducer {
        self.producer.read().expect("producer lock").clone()
    }

    /// Replace the producer after a transient failure. An idempotent producer
    /// whose messages timed out carries sequence state the broker may no
    /// longer accept (seen with a restarted broker: every later message timed
    /// out); a fresh producer gets a fresh producer id. Nothing unsent is lost:
    /// the rows are still in the outbox.
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

    fn value(&self, e: &OutboxEvent) -> Vec<u8> {
        match self.config.value {
            ValueFormat::Payload => serde_json::to_vec(&e.payload),
            ValueFormat::Envelope => serde_json::to_vec(&serde_json::json!({
                "id": e.event_id,
                "type": e.event,
                "key": e.key,
                "payload": e.payload,
                "occurred_at": e.created_at,
            })),
        }
        .expect("JSON values serialise")
    }

    fn headers(e: &OutboxEvent) -> OwnedHeaders {
        let id = e.event_id.to_string();
        let mut h = OwnedHeaders::new()
            .insert(Header {
                key: HEADER_EVENT_ID,
                value: Some(id.as_bytes()),
            })
            .insert(Header {
                key: HEADER_EVENT,
                value: Some(e.event.as_bytes()),
            });
        if let Some(obj) = e.headers.as_object() {
            for (k, v) in obj {
                let text = match v {
                    serde_json::Value::String(s) => s.clone(),
                    other => other.to_string(),
                };
                h = h.insert(Header {
                    key: k,
                    value: Some(text.as_bytes()),
                });
            }
        }
        h
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
    fn name(&self) -> &'static str {
        "kafka"
    }

    async fn publish(&self, batch: &[OutboxEvent]) -> Vec<Delivery> {
        let mut results: Vec<Option<Delivery>> = batch.iter().map(|_| None).collect();
        let mut stopped: HashSet<&str> = HashSet::new();
        let mut broker_down = false;
        let producer = self.producer();
        for wave in waves(batch) {
            let mut inflight = Vec::new();
            for i in wave {
                let e = &batch[i];
                let key = e.key.as_deref();
                if broker_down || key.is_some_and(|k| stopped.contains(k)) {
                    results[i] = Some(Delivery::Failed(SinkError::NotAttempted));
                    continue;
                }
                let topic = self.config.topic_for(&e.topic);
                let value = self.value(e);
                let refused = if !valid_topic(topic) {
                    Some(SinkError::rejected(format!(
                        "{topic:?} is not a valid Kafka topic name"
                    )))
                } else if value.len() > self.max_message_bytes {
                    Some(SinkError::rejected(format!(
                        "message value is {} bytes, over message.max.bytes ({})",
                        value.len(),
                        self.max_message_bytes
                    )))
                } else {
                    None
                };
                if let Some(err) = refused {
                    if let Some(k) = key {
                        stopped.insert(k);
                    }
                    results[i] = Some(Delivery::Failed(err));
                    continue;
                }
                let mut record = FutureRecord::<str, [u8]>::to(topic)
                    .payload(&value)
                    .headers(Self::headers(e));
                if let Some(k) = key {
                    record = record.key(k);
                }
                match producer.send_result(record) {
                    Ok(fut) => inflight.push((i, fut)),
                    Err((err, _)) => {
                        if let Some(k) = key {
                            stopped.insert(k);
                        }
                        let err = classify(
                            &err,
                            &format!("producing event {} to {topic:?}", e.event_id),
                        );
                        broker_down |= matches!(err, SinkError::Transient { .. });
                        results[i] = Some(Delivery::Failed(err));
                    }
                }
            }
            for (i, fut) in inflight {
                let e = &batch[i];
                results[i] = Some(match fut.await {
                    Ok(Ok(_)) => Delivery::Delivered,
                    Ok(Err((err, _))) => {
                        if let Some(k) = e.key.as_deref() {
                            stopped.insert(k);
                        }
                        let err = classify(
                            &err,
                            &format!(
                                "delivering event {} to {:?}",
                                e.event_id,
                                self.config.topic_for(&e.topic)
                            ),
                        );
                        broker_down |= matches!(err, SinkError::Transient { .. });
                        Delivery::Failed(err)
                    }
                    Err(_) => {
                        broker_down = true;
                        Delivery::Failed(SinkError::transient(
                            "producer dropped the delivery report",
                        ))
                    }
                });
            }
        }
        if broker_down {
            self.renew_producer();
        }
        results
            .into_iter()
            .map(|r| r.unwrap_or(Delivery::Failed(SinkError::NotAttempted)))
            .collect()
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
