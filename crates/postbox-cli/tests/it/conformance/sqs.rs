//! Amazon SQS: `moto` in server mode (a local AWS of each test's own), read
//! back by an independent client (Python `boto3`); the SQS inbox consumer.

use super::*;
use postbox_sqs::aws_sdk_sqs;
use postbox_testkit::MotoServer;
use serde_json::Value;
use std::time::Duration;

conformance!(
    SqsFixture,
    inbox_consumer,
    cloudevents,
    cloudevents_consumer
);

/// A moto of the test's own, a FIFO queue per topic.
pub(crate) struct SqsFixture {
    pub(crate) moto: MotoServer,
    client: aws_sdk_sqs::Client,
}

impl SqsFixture {
    fn queue_url(&self, topic: &str) -> String {
        format!("{}/123456789012/{topic}.fifo", self.moto.url())
    }
}

/// `--sink` and the target, region and endpoint flags of `sink` (sqs, sns).
pub(crate) fn aws_relay_args(
    moto: &MotoServer,
    sink: &str,
    target_flag: &str,
    target: &str,
) -> Vec<String> {
    let endpoint = moto.url();
    let args = [
        "--sink",
        sink,
        target_flag,
        target,
        &format!("--{sink}-region"),
        "us-east-1",
        &format!("--{sink}-endpoint-url"),
        &endpoint,
    ];
    args.map(String::from).to_vec()
}

impl BrokerFixture for SqsFixture {
    const NAME: &'static str = "sqs";
    // moto answers a batch call in tens of milliseconds, slower under
    // concurrent relays: fewer events, small batches, a long publish timeout.
    const KILL_EVENTS: usize = 200;
    const KILL_FLAGS: &'static [&'static str] = &["--batch-size", "20", "--publish-timeout", "20s"];
    // moto drops a re-sent deduplication id, as SQS does.
    const DROPS_RESENDS: bool = true;
    const CE_BINARY_PARTITIONKEY: bool = false;

    async fn start(_: &str, _: Broker) -> Self {
        let moto = MotoServer::start().await;
        let client = sqs(&moto).await;
        SqsFixture { moto, client }
    }

    async fn create_topic(&self, topic: &str) {
        create_queue(&self.client, &format!("{topic}.fifo")).await;
    }

    fn relay_args(&self) -> Vec<String> {
        let target = self.queue_url("{topic}");
        aws_relay_args(&self.moto, "sqs", "--sqs-queue-url", &target)
    }

    fn relay_env(&self) -> Vec<(&'static str, &'static str)> {
        MotoServer::env().to_vec()
    }

    async fn read(&self, topic: &str, n: usize) -> Vec<Arrived> {
        let attribute = |m: &Value, name: &str| m["attributes"][name].as_str().map(str::to_owned);
        boto3_read(&self.moto, &self.queue_url(topic), n)
            .await
            .into_iter()
            .map(|m| Arrived {
                id: attribute(&m, "postbox-event-id").unwrap(),
                key: attribute(&m, "postbox-key"),
                event: attribute(&m, "postbox-event"),
                payload: serde_json::from_str(m["body"].as_str().unwrap()).unwrap(),
                headers: attribute(&m, "postbox-headers")
                    .map(|h| serde_json::from_str(&h).unwrap())
                    .unwrap_or_default(),
                raw: m,
            })
            .collect()
    }

    async fn read_wire(&self, topic: &str, n: usize) -> Vec<Value> {
        boto3_read(&self.moto, &self.queue_url(topic), n)
            .await
            .into_iter()
            .map(|m| {
                serde_json::json!({"binding": "http", "headers": m["attributes"], "body": m["body"], "key": m["groupId"]})
            })
            .collect()
    }

    fn check(&self, m: &Arrived, row: &Row) {
        assert_eq!(m.raw["groupId"], row.key.as_str(), "group = the event key");
        assert_eq!(m.raw["dedupId"], m.id, "deduplication id = the event id");
    }

    async fn refusals(&self, queue: &str) -> Vec<Refusal> {
        let absent = format!("{queue}-absent");
        vec![
            Refusal::new(&absent, "x", 0, &["does not exist", &absent]),
            Refusal::new(queue, "big", 300 * 1024, &["at most 262144"]),
        ]
    }
}

impl ConsumerFixture for SqsFixture {
    // Not checked: against moto, a dead consumer's messages come back after
    // later ones of their group.
    const KEEPS_ORDER: bool = false;

    /// A dead consumer's messages reappear after their visibility timeout.
    fn consume<H: Handler>(&self, topic: &str, c: Consume<H>) -> Consuming {
        let (client, queue) = (self.client.clone(), self.queue_url(topic));
        let options = postbox_sqs::ConsumerOptions {
            wait: Duration::from_secs(1),
            visibility: Duration::from_secs(2),
            ..Default::default()
        };
        Box::pin(async move {
            let (inbox, h) = (&c.inbox, &c.handler);
            postbox_sqs::inbox_consumer(inbox, &client, &queue, h, options, c.stop).await
        })
    }
}

/// The test's own AWS configuration for `moto`, with its static credentials.
async fn aws(moto: &MotoServer) -> postbox_sqs::aws_config::SdkConfig {
    postbox_sqs::sdk_config(Some("us-east-1"), Some(&moto.url()))
        .await
        .into_builder()
        .credentials_provider(aws_sdk_sqs::config::SharedCredentialsProvider::new(
            aws_sdk_sqs::config::Credentials::new("test", "test", None, None, "moto"),
        ))
        .build()
}

async fn sqs(moto: &MotoServer) -> aws_sdk_sqs::Client {
    aws_sdk_sqs::Client::new(&aws(moto).await)
}

async fn create_queue(c: &aws_sdk_sqs::Client, name: &str) -> String {
    let mut q = c.create_queue().queue_name(name);
    if name.ends_with(".fifo") {
        q = q.attributes(aws_sdk_sqs::types::QueueAttributeName::FifoQueue, "true");
    }
    q.send().await.unwrap().queue_url().unwrap().to_owned()
}

/// An SNS topic `<name><suffix>` and an SQS queue `<name>-sub<suffix>`
/// subscribed to it with raw delivery (the attributes travel); `.fifo`
/// makes both FIFO. Returns (topic ARN, queue URL).
pub(crate) async fn topic_with_a_queue(
    moto: &MotoServer,
    name: &str,
    suffix: &str,
) -> (String, String) {
    let sns = postbox_sqs::aws_sdk_sns::Client::new(&aws(moto).await);
    let mut topic = sns.create_topic().name(format!("{name}{suffix}"));
    if suffix == ".fifo" {
        topic = topic.attributes("FifoTopic", "true");
    }
    let topic_arn = topic.send().await.unwrap().topic_arn().unwrap().to_owned();
    let queue = create_queue(&sqs(moto).await, &format!("{name}-sub{suffix}")).await;
    sns.subscribe()
        .topic_arn(&topic_arn)
        .protocol("sqs")
        .endpoint(format!(
            "arn:aws:sqs:us-east-1:123456789012:{name}-sub{suffix}"
        ))
        .attributes("RawMessageDelivery", "true")
        .send()
        .await
        .unwrap();
    (topic_arn, queue)
}

/// What boto3 read: at least `n` messages.
pub(crate) async fn boto3_read(moto: &MotoServer, queue_url: &str, n: usize) -> Vec<Value> {
    let n = n.to_string();
    let out = python("sqs_read.py", &[&moto.url(), queue_url, &n, "30"]).await;
    serde_json::from_str(&out).unwrap()
}
