//! Redis Streams: the shared Redis (or one of the test's own), read back by an
//! independent client (Node `ioredis`); the consumer-group inbox reader.

use super::*;
use crate::node_interop::node;
use redis::AsyncCommands;
use serde_json::Value;
use std::sync::Mutex;
use std::time::Duration;

conformance!(
    StreamsFixture,
    killable_broker,
    inbox_consumer,
    cloudevents,
    cloudevents_consumer
);

/// The shared Redis (or one of the test's own, AOF on): a stream per topic,
/// which XADD makes.
struct StreamsFixture {
    redis: Option<RedisServer>,
    url: String,
    /// Keys made, deleted by `cleanup`.
    made: Mutex<Vec<String>>,
}

/// The stream's entries as ioredis reads them: (entry id, fields).
pub(crate) async fn ioredis_read(url: &str, stream: &str) -> Vec<Value> {
    let lines = node("stream_read.mjs", &[url, stream]).await;
    serde_json::from_str(lines.last().expect("one JSON line")).unwrap()
}

async fn connection(url: &str) -> redis::aio::MultiplexedConnection {
    let client = redis::Client::open(url).unwrap();
    postbox_testkit::connect_retrying("Redis", || client.get_multiplexed_async_connection()).await
}

impl BrokerFixture for StreamsFixture {
    const NAME: &'static str = "rstream";
    const DROPS_RESENDS: bool = false;

    async fn start(_: &str, broker: Broker) -> Self {
        // appendonly yes, appendfsync always: SIGKILL loses nothing acknowledged.
        let redis = match broker {
            Broker::Shared => None,
            Broker::Own => Some(RedisServer::start().await),
        };
        let url = redis
            .as_ref()
            .map_or_else(postbox_testkit::redis_url, |r| r.url());
        StreamsFixture {
            redis,
            url,
            made: Mutex::default(),
        }
    }

    async fn create_topic(&self, topic: &str) {
        self.made.lock().unwrap().push(topic.to_owned());
    }

    fn relay_args(&self) -> Vec<String> {
        ["--sink", "redis_streams", "--redis-streams-url", &self.url]
            .map(String::from)
            .to_vec()
    }

    async fn read(&self, topic: &str, _: usize) -> Vec<Arrived> {
        let field = |e: &Value, name: &str| e["fields"][name].as_str().map(str::to_owned);
        let json = |e: &Value, name: &str| -> Value {
            field(e, name).map_or(Value::Null, |s| serde_json::from_str(&s).unwrap())
        };
        ioredis_read(&self.url, topic)
            .await
            .into_iter()
            .map(|e| Arrived {
                id: field(&e, "id").unwrap(),
                key: field(&e, "key"),
                event: field(&e, "event"),
                payload: json(&e, "payload"),
                headers: json(&e, "headers").as_object().cloned().unwrap_or_default(),
                raw: e,
            })
            .collect()
    }

    async fn read_wire(&self, topic: &str, _: usize) -> Vec<Value> {
        ioredis_read(&self.url, topic)
            .await
            .into_iter()
            .map(|e| {
                let mut headers = e["fields"].as_object().unwrap().clone();
                let body = headers.remove("payload").expect("a payload field");
                serde_json::json!({"binding": "http", "headers": headers, "body": body})
            })
            .collect()
    }

    /// A string where a topic's stream should be: the batch's script is
    /// refused before writing, then waves find the events at fault.
    async fn refusals(&self, queue: &str) -> Vec<Refusal> {
        let taken = format!("{queue}-taken");
        let _: () = connection(&self.url)
            .await
            .set(&taken, "not a stream")
            .await
            .unwrap();
        self.made.lock().unwrap().push(taken.clone());
        let error = format!("key {taken:?} holds a value of another type");
        (0..5)
            .map(|_| Refusal::new(&taken, "x", 0, &[&error]))
            .collect()
    }

    async fn cleanup(self) {
        let keys = self.made.lock().unwrap().clone();
        if !keys.is_empty() {
            let _: () = connection(&self.url).await.del(keys).await.unwrap();
        }
    }
}

impl KillableBroker for StreamsFixture {
    fn kill(&mut self) {
        self.redis.as_mut().expect("a server of its own").kill();
    }

    async fn restart(&mut self) {
        self.redis
            .as_mut()
            .expect("a server of its own")
            .restart()
            .await;
    }
}

impl ConsumerFixture for StreamsFixture {
    const KEEPS_ORDER: bool = false;

    /// Consumers "1", "2"… of the group "effects": the second takes over the
    /// entries the first left pending once they have been idle long enough.
    fn consume<H: Handler>(&self, topic: &str, c: Consume<H>) -> Consuming {
        let client = redis::Client::open(self.url.as_str()).unwrap();
        let stream = topic.to_owned();
        let mut options = postbox_redis_streams::ConsumerOptions::new("effects", &c.n.to_string());
        options.claim_idle = Duration::from_millis(500);
        options.block = Duration::from_millis(200);
        Box::pin(async move {
            let (inbox, h) = (&c.inbox, &c.handler);
            postbox_redis_streams::inbox_consumer(inbox, &client, &stream, h, options, c.stop).await
        })
    }
}
