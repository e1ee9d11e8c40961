//! BullMQ: the shared Redis (or one of the test's own), read back by an
//! independent client (Node `bullmq`'s `Queue`); the inbox worker.

use super::*;
use crate::node_interop::node;
use futures::TryStreamExt;
use postbox_bullmq::bullmq::options::RedisConnectionOptions;
use postbox_bullmq::bullmq::WorkerOptions;
use postbox_testkit::Proxy;
use redis::AsyncCommands;
use serde_json::Value;

conformance!(
    BullmqFixture,
    killable_broker,
    inbox_consumer,
    cloudevents_structured,
    cloudevents_structured_consumer
);

/// The shared Redis (or one of the test's own, AOF on): a BullMQ queue per
/// topic, which the first add makes.
struct BullmqFixture {
    redis: Option<RedisServer>,
    url: String,
    /// The test's queue: its keys and those of the queues named after it
    /// are `bull:<queue>…`, deleted by `cleanup`.
    queue: String,
}

/// A queue's job counts and its waiting jobs, oldest first, as Node
/// `bullmq` reads them without processing any.
async fn bullmq_read(url: &str, queue: &str) -> (Value, Vec<Value>) {
    let lines = node("bullmq_read.mjs", &[url, queue]).await;
    let read: Value = serde_json::from_str(lines.last().expect("one JSON line")).unwrap();
    let jobs = read["jobs"].as_array().expect("jobs").clone();
    (read["counts"].clone(), jobs)
}

/// A job as the suite compares it: the job id is the event id, its name the
/// event type; a trace context the relay put under the data's `_trace` is
/// the row's `traceparent`/`tracestate`, the key and other headers are under
/// `_postbox`, the rest of the data its payload (as the inbox worker's
/// `message` reads it).
fn arrived(job: Value) -> Arrived {
    let mut payload = job["data"].clone();
    let field = postbox_bullmq::TRACE_FIELD;
    let traced = payload[field].get("traceparent").is_some();
    let trace = match payload.as_object_mut() {
        Some(data) if traced => data.remove(field),
        _ => None,
    };
    let meta = payload
        .as_object_mut()
        .and_then(|data| data.remove(postbox::wire::BULLMQ_META_FIELD))
        .unwrap_or_default();
    let mut headers = trace
        .and_then(|t| t.as_object().cloned())
        .unwrap_or_default();
    if let Some(more) = meta["headers"].as_object() {
        headers.extend(more.clone());
    }
    Arrived {
        id: job["id"].as_str().unwrap().to_owned(),
        key: meta["key"].as_str().map(str::to_owned),
        event: job["name"].as_str().map(str::to_owned),
        payload,
        headers,
        raw: job,
    }
}

impl BrokerFixture for BullmqFixture {
    const NAME: &'static str = "bullmq";
    // A job id that exists (each job's is its event id) is not added again.
    const DROPS_RESENDS: bool = true;

    async fn start(queue: &str, broker: Broker) -> Self {
        // appendonly yes, appendfsync always: SIGKILL loses nothing acknowledged.
        let redis = match broker {
            Broker::Shared => None,
            Broker::Own => Some(RedisServer::start().await),
        };
        let url = redis
            .as_ref()
            .map_or_else(postbox_testkit::redis_url, |r| r.url());
        let queue = queue.to_owned();
        BullmqFixture { redis, url, queue }
    }

    async fn create_topic(&self, _: &str) {}

    fn relay_args(&self) -> Vec<String> {
        ["--sink", "bullmq", "--bullmq-redis-url", &self.url]
            .map(String::from)
            .to_vec()
    }

    /// Every job of the queue: all are waiting (nothing consumes them here)
    /// and each is listed once.
    async fn read(&self, topic: &str, _: usize) -> Vec<Arrived> {
        let (counts, jobs) = bullmq_read(&self.url, topic).await;
        assert_eq!(counts["waiting"], jobs.len(), "{counts}");
        for (state, n) in counts.as_object().unwrap() {
            assert!(state == "waiting" || n == 0, "{counts}");
        }
        jobs.into_iter().map(arrived).collect()
    }

    async fn read_wire(&self, topic: &str, _: usize) -> Vec<Value> {
        let (_, jobs) = bullmq_read(&self.url, topic).await;
        jobs.into_iter()
            .map(|j| serde_json::json!({"binding": "job", "headers": {}, "body": j["data"].to_string()}))
            .collect()
    }

    fn check(&self, m: &Arrived, _: &Row) {
        let opts = &m.raw["opts"];
        assert_eq!(opts["jobId"], m.id.as_str(), "{opts}");
        // Completed jobs leave Redis after `keep_completed` (an hour).
        assert_eq!(opts["removeOnComplete"]["age"], 3600, "{opts}");
    }

    /// A queue whose meta key is a string (a foreign or corrupted key: the
    /// add script gets `WRONGTYPE` inside the batch's transaction, then in
    /// waves), a topic that is no BullMQ queue name, and a job over
    /// `max_job_bytes`.
    async fn refusals(&self, queue: &str) -> Vec<Refusal> {
        let broken = format!("{queue}-broken");
        let mut redis = connection(&self.url).await;
        let _: () = redis
            .set(format!("bull:{broken}:meta"), "not a hash")
            .await
            .unwrap();
        let in_broken = format!("queue {broken:?}");
        let mut refusals: Vec<Refusal> = ["x", "y", "x"]
            .iter()
            .map(|k| Refusal::new(&broken, k, 0, &["WRONGTYPE", &in_broken]))
            .collect();
        refusals.push(Refusal::new(
            &format!("{queue}:colon"),
            "c",
            0,
            &["is not a valid BullMQ queue name (it contains ':')"],
        ));
        refusals.push(Refusal::new(
            queue,
            "big",
            2000,
            &["over bullmq.max_job_bytes (1000)"],
        ));
        refusals
    }

    fn refusal_flags(&self) -> Vec<String> {
        vec!["--bullmq-max-job-bytes".into(), "1000".into()]
    }

    /// The test's queues on the shared Redis.
    async fn cleanup(self) {
        if self.redis.is_some() {
            return;
        }
        let mut redis = connection(&self.url).await;
        let keys: Vec<String> = redis
            .scan_match::<_, String>(format!("bull:{}*", self.queue))
            .await
            .unwrap()
            .try_collect()
            .await
            .unwrap();
        if !keys.is_empty() {
            let _: () = redis.del(keys).await.unwrap();
        }
    }
}

async fn connection(url: &str) -> redis::aio::MultiplexedConnection {
    let client = redis::Client::open(url).unwrap();
    postbox_testkit::connect_retrying("Redis", || client.get_multiplexed_async_connection()).await
}

impl KillableBroker for BullmqFixture {
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

/// A consumer's own way to Redis: a proxy that goes with the consumer's
/// future, closing its connections.
///
/// The test kills a consumer by dropping its future, but a `bullmq` worker
/// runs on tasks of its own, which that does not end: the dropped worker,
/// its job hung, would renew the job's lock for good, and the job would
/// never come back as it does when a consumer's process dies (the crash
/// test then times out). With its connections closed, the lock expires.
struct Link {
    url: String,
    _proxy: Proxy,
}

impl Link {
    async fn open(url: &str) -> Link {
        let mut url = url::Url::parse(url).unwrap();
        let target = (url.host_str().unwrap(), url.port().unwrap_or(6379));
        let target = tokio::net::lookup_host(target)
            .await
            .unwrap()
            .next()
            .unwrap();
        let proxy = Proxy::start(target).await.unwrap();
        url.set_ip_host([127, 0, 0, 1].into()).unwrap();
        url.set_port(Some(proxy.port())).unwrap();
        Link {
            url: url.into(),
            _proxy: proxy,
        }
    }
}

impl ConsumerFixture for BullmqFixture {
    // Not claimed: a dead worker's job comes back once its lock expires,
    // after the jobs the next worker took meanwhile (guides/consuming/bullmq.md).
    const KEEPS_ORDER: bool = false;

    /// The inbox worker, with a lock of two seconds checked every second:
    /// a dead consumer's job comes back within seconds, not BullMQ's
    /// default 30.
    fn consume<H: Handler>(&self, topic: &str, c: Consume<H>) -> Consuming {
        let (url, queue) = (self.url.clone(), topic.to_owned());
        Box::pin(async move {
            let link = Link::open(&url).await;
            let opts = WorkerOptions {
                connection: RedisConnectionOptions {
                    url: link.url.clone(),
                    ..Default::default()
                },
                drain_delay: 1,
                lock_duration: 2000,
                stalled_interval: 1000,
                ..Default::default()
            };
            let worker =
                postbox_bullmq::inbox_worker(c.inbox, &queue, c.handler, opts, c.stop).await?;
            worker.run().await?;
            drop(link);
            Ok(())
        })
    }
}
