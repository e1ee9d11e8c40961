//! NATS JetStream: a `nats-server` of each test's own, read back by the NATS
//! maintainers' JavaScript client; the inbox pull consumer.

use super::*;
use crate::node_interop::node;
use postbox_nats::async_nats::jetstream::{self, stream};
use postbox_testkit::NatsServer;
use serde_json::Value;
use std::time::Duration;

conformance!(
    NatsFixture,
    killable_broker,
    inbox_consumer,
    cloudevents,
    cloudevents_consumer
);

/// A server of the test's own (`max_payload: 4096`, for the refusals);
/// subjects `{topic}.{key}`, one file-backed stream per topic.
struct NatsFixture {
    nats: NatsServer,
    js: jetstream::Context,
}

/// The stream capturing `topic`'s subjects.
pub(crate) fn stream_name(topic: &str) -> String {
    topic.replace('-', "_").to_uppercase()
}

async fn js(nats: &NatsServer) -> jetstream::Context {
    let url = nats.url();
    let client = postbox_testkit::connect_retrying("NATS", || {
        postbox_nats::async_nats::connect(url.as_str())
    })
    .await;
    jetstream::new(client)
}

impl BrokerFixture for NatsFixture {
    const NAME: &'static str = "nats";
    const DROPS_RESENDS: bool = true;

    async fn start(_: &str, _: Broker) -> Self {
        let nats = NatsServer::start("max_payload: 4096").await;
        let js = js(&nats).await;
        NatsFixture { nats, js }
    }

    async fn create_topic(&self, topic: &str) {
        self.js
            .create_stream(stream::Config {
                name: stream_name(topic),
                subjects: vec![format!("{topic}.>")],
                storage: stream::StorageType::File,
                ..Default::default()
            })
            .await
            .unwrap();
    }

    fn relay_args(&self) -> Vec<String> {
        // The ack timeout below the tests' --publish-timeout (3s), as the relay requires.
        let url = self.nats.url();
        let args = [
            "--sink",
            "nats",
            "--nats-url",
            &url,
            "--nats-ack-timeout",
            "2s",
        ];
        let mut args: Vec<String> = args.map(String::from).to_vec();
        args.extend(["--nats-subject".into(), "{topic}.{key}".into()]);
        args
    }

    /// The stream's messages (all it stores) as the JavaScript client reads them.
    async fn read(&self, topic: &str, n: usize) -> Vec<Arrived> {
        self.messages(topic, n)
            .await
            .into_iter()
            .map(|m| Arrived {
                id: m["headers"]["Nats-Msg-Id"].as_str().unwrap().to_owned(),
                key: m["headers"]["postbox-key"].as_str().map(str::to_owned),
                event: m["headers"]["postbox-event"].as_str().map(str::to_owned),
                payload: m["body"].clone(),
                headers: m["headers"].as_object().unwrap().clone(),
                raw: m,
            })
            .collect()
    }

    async fn read_wire(&self, topic: &str, n: usize) -> Vec<Value> {
        self.messages(topic, n)
            .await
            .into_iter()
            .map(|m| {
                let body = m["body"].to_string();
                serde_json::json!({"binding": "http", "headers": m["headers"], "body": body})
            })
            .collect()
    }

    fn check(&self, m: &Arrived, row: &Row) {
        assert_eq!(m.raw["subject"], format!("{}.{}", row.topic, row.key));
    }

    async fn refusals(&self, queue: &str) -> Vec<Refusal> {
        let no_stream = format!("{queue}-nostream");
        let subject = format!("no JetStream stream captures subject \"{no_stream}.x\"");
        vec![
            Refusal::new(&no_stream, "x", 0, &[&subject]),
            Refusal::new(queue, "big", 8000, &["max_payload"]),
        ]
    }
}

impl NatsFixture {
    /// What nats.js read of `topic`'s stream: at least `n`, and all it holds.
    async fn messages(&self, topic: &str, n: usize) -> Vec<Value> {
        let (url, stream) = (self.nats.url(), stream_name(topic));
        let mut want = n;
        loop {
            let lines = node(
                "nats_consume.mjs",
                &[&url, &stream, &want.to_string(), "15"],
            )
            .await;
            let v: Value = serde_json::from_str(lines.last().expect("one JSON line")).unwrap();
            let stored = v["stored"].as_u64().unwrap() as usize;
            if stored > want {
                want = stored;
                continue;
            }
            return v["messages"].as_array().unwrap().clone();
        }
    }
}

impl KillableBroker for NatsFixture {
    fn kill(&mut self) {
        self.nats.kill();
    }

    async fn restart(&mut self) {
        self.nats.restart().await;
    }
}

impl ConsumerFixture for NatsFixture {
    const KEEPS_ORDER: bool = true;

    fn consume<H: Handler>(&self, topic: &str, c: Consume<H>) -> Consuming {
        let (js, stream) = (self.js.clone(), stream_name(topic));
        Box::pin(async move {
            let mut config = postbox_nats::consumer_config("effects");
            // Short, so a test sees the redelivery soon.
            config.ack_wait = Duration::from_secs(1);
            let durable = js
                .get_stream(&stream)
                .await?
                .get_or_create_consumer("effects", config)
                .await?;
            postbox_nats::inbox_consumer(&c.inbox, &durable, &c.handler, c.stop).await
        })
    }
}
