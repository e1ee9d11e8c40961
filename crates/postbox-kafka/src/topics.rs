//! Which Kafka topics exist, from the broker's metadata, cached. librdkafka
//! waits up to `topic.metadata.propagation.max.ms` (30 s) for a missing topic
//! to appear and then reports a timeout, which looks like a broker outage; so
//! the sink asks first and refuses an event for a missing topic at once.

use postbox_relay::SinkError;
use rdkafka::producer::{FutureProducer, Producer};
use rdkafka::types::RDKafkaRespErr;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long an answer stands: a topic seen missing is looked up again soon,
/// so that creating it is noticed within a retry or two.
const PRESENT_FOR: Duration = Duration::from_secs(60);
const MISSING_FOR: Duration = Duration::from_secs(1);

#[derive(Default)]
pub(crate) struct Topics {
    known: Mutex<HashMap<String, (bool, Instant)>>,
}

impl Topics {
    /// The rejection of an event for Kafka topic `topic` (outbox topic
    /// `outbox_topic`) when that topic does not exist.
    pub(crate) async fn refusal(
        &self,
        producer: &FutureProducer,
        outbox_topic: &str,
        topic: &str,
    ) -> Option<SinkError> {
        self.missing(producer, topic).await.then(|| {
            SinkError::rejected(format!(
                "Kafka topic {topic:?} does not exist, and the relay does not create topics: create it, or send outbox topic {outbox_topic:?} to an existing one with [kafka.topics] or kafka.topic"
            ))
        })
    }

    /// Whether `topic` is known not to exist. When the broker cannot be asked,
    /// `false`: the produce itself then reports what is wrong.
    async fn missing(&self, producer: &FutureProducer, topic: &str) -> bool {
        if let Some(&(exists, at)) = self.known.lock().expect("topics lock").get(topic) {
            let ttl = if exists { PRESENT_FOR } else { MISSING_FOR };
            if at.elapsed() < ttl {
                return !exists;
            }
        }
        let (producer, name) = (producer.clone(), topic.to_owned());
        let lookup = tokio::task::spawn_blocking(move || {
            let metadata = producer
                .client()
                .fetch_metadata(Some(&name), Duration::from_secs(5))
                .ok()?;
            let t = metadata.topics().iter().find(|t| t.name() == name);
            Some(match t {
                None => false,
                Some(t) => {
                    t.error() != Some(RDKafkaRespErr::RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART)
                        && !t.partitions().is_empty()
                }
            })
        })
        .await;
        match lookup {
            Ok(Some(exists)) => {
                self.known
                    .lock()
                    .expect("topics lock")
                    .insert(topic.to_owned(), (exists, Instant::now()));
                !exists
            }
            _ => false,
        }
    }
}
