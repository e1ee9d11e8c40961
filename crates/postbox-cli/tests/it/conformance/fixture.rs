//! What a sink brings to the suite: its broker and how to read it
//! ([`BrokerFixture`]), and what only some brokers have: one the test may
//! kill ([`KillableBroker`]), an inbox consumer ([`ConsumerFixture`]).

use postbox::{BoxError, CancellationToken, Handler, InboxConsumer};
use serde_json::Value;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

/// Which broker a test needs.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Broker {
    /// Any: the shared server with names of the test's own, or a server of
    /// its own where the broker has no shared one.
    Shared,
    /// One of the test's own, which [`KillableBroker`] may kill.
    Own,
}

/// A message as the broker's independent client read it.
#[derive(Debug)]
pub struct Arrived {
    /// The outbox event id it carries.
    pub id: String,
    pub key: Option<String>,
    /// The event type.
    pub event: Option<String>,
    pub payload: Value,
    /// Its headers (or attributes), the row's among them, as text.
    pub headers: serde_json::Map<String, Value>,
    /// What the client printed, for the fixture's own checks.
    pub raw: Value,
}

/// An outbox row.
pub struct Row {
    pub topic: String,
    pub key: String,
    pub seq: i64,
    pub payload: Value,
    pub headers: Value,
    pub created_at: chrono::DateTime<chrono::Utc>,
}

/// An event a sink must refuse: its topic and key, the payload padded by
/// `pad` bytes, and the words its dead letter must contain.
pub struct Refusal {
    pub topic: String,
    pub key: String,
    pub pad: usize,
    pub error: Vec<String>,
}

impl Refusal {
    pub fn new(topic: &str, key: &str, pad: usize, error: &[&str]) -> Refusal {
        Refusal {
            topic: topic.to_owned(),
            key: key.to_owned(),
            pad,
            error: error.iter().map(|s| s.to_string()).collect(),
        }
    }
}

/// A sink under test: its broker, and how to read it without postbox.
pub trait BrokerFixture: Sized {
    /// The schema prefix of its tests.
    const NAME: &'static str;
    /// Events of the relay-kill test.
    const KILL_EVENTS: usize = 1000;
    /// CloudEvents binary mode carries `partitionkey` (SQS and SNS leave it
    /// to the FIFO group: they take 10 message attributes).
    const CE_BINARY_PARTITIONKEY: bool = true;
    /// Relay flags of the relay-kill test.
    const KILL_FLAGS: &'static [&'static str] = &["--batch-size", "50"];
    /// The broker drops a re-sent event id (a message id, a FIFO
    /// deduplication id): what it holds is each event once.
    const DROPS_RESENDS: bool;

    /// The broker for a test whose topic (where the broker names one) is `queue`.
    async fn start(queue: &str, broker: Broker) -> Self;
    /// Create what `topic` needs on the broker (a stream, a queue, an
    /// exchange bound to one, a Kafka topic).
    async fn create_topic(&self, topic: &str);
    /// `--sink` and its flags.
    fn relay_args(&self) -> Vec<String>;
    /// Environment the relay needs.
    fn relay_env(&self) -> Vec<(&'static str, &'static str)> {
        Vec::new()
    }
    /// At least `n` messages of `topic` (all it holds, where the client can
    /// tell), read with the broker's own client.
    async fn read(&self, topic: &str, n: usize) -> Vec<Arrived>;
    /// At least `n` messages of `topic` as they came off the wire, for the
    /// CloudEvents SDKs (`tests/{node,python}/cloudevents_parse.*`): each
    /// `{"binding": "http" | "kafka" | "amqp" | "job", "headers": {name:
    /// text}, "body": text, "key", "content_type"}`, read with the broker's
    /// own client as [`read`](Self::read) does.
    async fn read_wire(&self, topic: &str, n: usize) -> Vec<Value>;
    /// What the sink maps besides the fields every sink carries (a subject,
    /// a routing key, a group), checked against each message read.
    fn check(&self, _arrived: &Arrived, _row: &Row) {}
    /// Events the sink must dead-letter (creating what makes them fail),
    /// for a test whose good events go to `queue`.
    async fn refusals(&self, queue: &str) -> Vec<Refusal>;
    /// Relay flags the refusals need (a size limit).
    fn refusal_flags(&self) -> Vec<String> {
        Vec::new()
    }
    /// Remove what the test made on a shared server.
    async fn cleanup(self) {}
}

/// A broker of the test's own it may SIGKILL and start again.
pub trait KillableBroker: BrokerFixture {
    /// What it had stored survives a restart (tansu's memory engine keeps
    /// nothing: [`KillableBroker::restart`] creates the topics again).
    const KEEPS_MESSAGES: bool = true;
    fn kill(&mut self);
    async fn restart(&mut self);
}

/// What a [`ConsumerFixture`]'s consumer runs with.
pub struct Consume<H> {
    /// The inbox loop on the test's database.
    pub inbox: InboxConsumer,
    pub handler: Arc<H>,
    /// Which consumer of the test this is (the first may die), for brokers
    /// that name their consumers; consumers of one test share one group.
    pub n: usize,
    pub stop: CancellationToken,
}

/// A consumer running, until its `stop` or an error.
pub type Consuming = Pin<Box<dyn Future<Output = Result<(), BoxError>> + Send>>;

/// A sink whose broker crate has an inbox consumer.
pub trait ConsumerFixture: BrokerFixture {
    /// Its messages take effect in the order of the stream or queue, even
    /// across a consumer's crash.
    const KEEPS_ORDER: bool;
    /// The broker crate's inbox consumer on `topic`.
    fn consume<H: Handler>(&self, topic: &str, c: Consume<H>) -> Consuming;
}
