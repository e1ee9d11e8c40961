//! Kafka: a Kafka-protocol broker of each test's own (tansu), read back by an
//! independent client (Python confluent-kafka); the inbox consumer.

use super::*;
use crate::kafka::{kafka_args, stream_consumer};
use postbox_testkit::{kafka_consume_independent, KafkaBroker};
use std::sync::Mutex;

conformance!(
    KafkaFixture,
    killable_broker,
    inbox_consumer,
    cloudevents,
    cloudevents_consumer
);

/// A broker of the test's own (tansu, memory storage), four partitions a topic.
struct KafkaFixture {
    broker: KafkaBroker,
    /// Created again after a restart: the memory engine forgets them.
    topics: Mutex<Vec<String>>,
}

impl BrokerFixture for KafkaFixture {
    const NAME: &'static str = "kafka";
    const DROPS_RESENDS: bool = false;
    /// In waves: a relay SIGKILLed inside a transaction leaves it open, and
    /// the test broker (tansu) never times it out, so `read_committed`
    /// readers would wait behind it for good (docs/src/sinks/kafka.md). The
    /// test passed only when the kill fell between two transactions (it
    /// timed out in CI at 60 s, then at 150 s). Aborting an abandoned
    /// transaction is the broker's part; the relay's part, sending again
    /// what the dead relay did not mark, is the same in both modes.
    const KILL_FLAGS: &'static [&'static str] = &["--batch-size", "50", "--kafka-publish", "waves"];

    async fn start(_: &str, _: Broker) -> Self {
        KafkaFixture {
            broker: KafkaBroker::start().await,
            topics: Mutex::default(),
        }
    }

    async fn create_topic(&self, topic: &str) {
        self.broker.create_topic(topic, 4);
        self.topics.lock().unwrap().push(topic.to_owned());
    }

    fn relay_args(&self) -> Vec<String> {
        kafka_args(&self.broker)
    }

    async fn read(&self, topic: &str, n: usize) -> Vec<Arrived> {
        let header =
            |m: &serde_json::Value, name: &str| m["headers"][name].as_str().map(str::to_owned);
        // Generous: a loaded machine's Kafka reader is slow to start. (The
        // relay-kill test sends in waves: see KILL_FLAGS.)
        kafka_consume_independent(&self.broker.bootstrap(), topic, n, 150)
            .await
            .into_iter()
            .map(|m| Arrived {
                id: header(&m, "postbox-event-id").unwrap(),
                key: m["key"].as_str().map(str::to_owned),
                event: header(&m, "postbox-event"),
                payload: serde_json::from_str(m["value"].as_str().unwrap()).unwrap(),
                headers: m["headers"].as_object().unwrap().clone(),
                raw: m,
            })
            .collect()
    }

    async fn read_wire(&self, topic: &str, n: usize) -> Vec<Value> {
        kafka_consume_independent(&self.broker.bootstrap(), topic, n, 150)
            .await
            .into_iter()
            .map(|m| {
                serde_json::json!({"binding": "kafka", "headers": m["headers"], "key": m["key"], "body": m["value"]})
            })
            .collect()
    }

    /// A topic that was never created is refused as such (librdkafka alone
    /// would wait for it and time out, which looks like an outage); a
    /// message over `message.max.bytes`.
    async fn refusals(&self, queue: &str) -> Vec<Refusal> {
        let missing = format!("{queue}-missing");
        let mut refusals: Vec<Refusal> = (0..4)
            .map(|i| {
                let words = ["does not exist", &missing, "kafka.topics"];
                Refusal::new(&missing, &format!("m{i}"), 0, &words)
            })
            .collect();
        let big = Refusal::new(queue, "big", 2 * 1024 * 1024, &["over message.max.bytes"]);
        refusals.push(big);
        refusals
    }
}

impl KillableBroker for KafkaFixture {
    const KEEPS_MESSAGES: bool = false;

    fn kill(&mut self) {
        self.broker.kill();
    }

    async fn restart(&mut self) {
        self.broker.restart().await;
        for topic in self.topics.lock().unwrap().iter() {
            self.broker.create_topic(topic, 4);
        }
    }
}

impl ConsumerFixture for KafkaFixture {
    const KEEPS_ORDER: bool = true;

    /// Consumers of one group: the second replays from the last committed offset.
    fn consume<H: Handler>(&self, topic: &str, c: Consume<H>) -> Consuming {
        let kafka = stream_consumer(&self.broker, &format!("g-{topic}"), topic);
        Box::pin(async move {
            postbox_kafka::inbox_consumer(&c.inbox, &kafka, &c.handler, c.stop).await
        })
    }
}
