//! Amazon SNS: `moto` in server mode (a local AWS of each test's own), read
//! back by Python `boto3` from a queue subscribed to the topic, which the SQS
//! inbox consumer reads too.

use super::sqs::{aws_relay_args, topic_with_a_queue, SqsFixture};
use super::*;
use postbox_testkit::MotoServer;

conformance!(
    SnsFixture,
    inbox_consumer,
    cloudevents,
    cloudevents_consumer
);

/// A FIFO topic per topic, and a FIFO queue subscribed to it (raw delivery,
/// so the attributes travel) that the reader and the consumer read.
struct SnsFixture(SqsFixture);

impl BrokerFixture for SnsFixture {
    const NAME: &'static str = "sns";
    const KILL_EVENTS: usize = SqsFixture::KILL_EVENTS;
    const KILL_FLAGS: &'static [&'static str] = SqsFixture::KILL_FLAGS;
    const DROPS_RESENDS: bool = true;
    const CE_BINARY_PARTITIONKEY: bool = false;

    async fn start(queue: &str, broker: Broker) -> Self {
        SnsFixture(SqsFixture::start(queue, broker).await)
    }

    async fn create_topic(&self, topic: &str) {
        topic_with_a_queue(&self.0.moto, topic, ".fifo").await;
    }

    fn relay_args(&self) -> Vec<String> {
        let arn = "arn:aws:sns:us-east-1:123456789012:{topic}.fifo";
        aws_relay_args(&self.0.moto, "sns", "--sns-topic-arn", arn)
    }

    fn relay_env(&self) -> Vec<(&'static str, &'static str)> {
        MotoServer::env().to_vec()
    }

    async fn read(&self, topic: &str, n: usize) -> Vec<Arrived> {
        self.0.read(&format!("{topic}-sub"), n).await
    }

    async fn read_wire(&self, topic: &str, n: usize) -> Vec<Value> {
        self.0.read_wire(&format!("{topic}-sub"), n).await
    }

    fn check(&self, m: &Arrived, row: &Row) {
        assert_eq!(m.raw["groupId"], row.key.as_str(), "group = the event key");
    }

    async fn refusals(&self, queue: &str) -> Vec<Refusal> {
        let absent = format!("{queue}-absent");
        vec![
            Refusal::new(&absent, "x", 0, &["does not exist", &absent]),
            Refusal::new(queue, "big", 300 * 1024, &["at most 262144"]),
        ]
    }
}

impl ConsumerFixture for SnsFixture {
    const KEEPS_ORDER: bool = SqsFixture::KEEPS_ORDER;

    fn consume<H: Handler>(&self, topic: &str, c: Consume<H>) -> Consuming {
        self.0.consume(&format!("{topic}-sub"), c)
    }
}
