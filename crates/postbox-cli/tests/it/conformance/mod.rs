//! The guarantees every sink keeps, written once and run for each (as River's
//! `riverdrivertest` and apalis's `generic_storage_test!`).
//!
//! Each sink has a file here with its [`BrokerFixture`] (a broker, what a
//! topic needs there, the relay's flags, and a reader that is the broker's
//! own independent client, never postbox's code) and one line,
//!
//! ```ignore
//! conformance!(NatsFixture, killable_broker, inbox_consumer);
//! ```
//!
//! which makes `conformance::nats::<guarantee>` of every test below. What
//! not every broker has is a capability of its own, named in that line: a
//! broker the test may kill and restart ([`KillableBroker`]), an inbox
//! consumer ([`ConsumerFixture`]). A guarantee added here runs for every
//! sink that has what it needs; what only one sink does stays in its own
//! test file (`kafka.rs`, `nats.rs`…).
//!
//! The suite lives beside the integration tests rather than in
//! `postbox-testkit`: it runs the `postbox` binary this test crate is built
//! with, shares [`Ctx`] and the Node and Python readers with the other tests,
//! and its consumer tests use every broker crate's consumer, which the
//! testkit (a dependency of the chaos harness and the bench) must not pull in.

mod kafka;
pub(crate) mod nats;
pub(crate) mod rabbitmq;
pub(crate) mod redis_streams;
mod sns;
pub(crate) mod sqs;
mod webhook;

use crate::support::*;
use postbox::{BoxError, CancellationToken, Event, Handler, InboxConsumer};
use serde_json::Value;
use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::Arc;
use std::time::{Duration, Instant};

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

/// A test of every guarantee for a fixture: `conformance!(Fixture)`, then
/// the capabilities it has (`killable_broker`, `inbox_consumer`).
macro_rules! conformance {
    ($fixture:ty $(, $capability:ident)* $(,)?) => {
        $crate::conformance::tests!(core, $fixture);
        $($crate::conformance::tests!($capability, $fixture);)*
    };
}
pub(crate) use conformance;

macro_rules! tests {
    (core, $f:ty) => {
        $crate::conformance::tests!($f: events_arrive_once_and_in_key_order_through_relay_kills,
            refusals_are_dead_lettered_while_other_keys_flow,
            refusals_are_dead_lettered_when_sent_rows_are_deleted,
            headers_arrive_as_text_and_a_malformed_trace_context_is_dropped);
    };
    (killable_broker, $f:ty) => {
        $crate::conformance::tests!($f: a_killed_broker_costs_no_attempts_and_loses_nothing);
    };
    (inbox_consumer, $f:ty) => {
        $crate::conformance::tests!($f: inbox_consumer_applies_each_message_once_across_a_crash,
            inbox_consumer_skips_the_re_send_of_a_relay_killed_before_its_commit,
            inbox_consumer_survives_a_postgresql_crash);
    };
    ($f:ty: $($name:ident),+) => {$(
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $name() {
            $crate::conformance::$name::<$f>().await;
        }
    )+};
}
pub(crate) use tests;

/// A relay on the fixture's broker.
fn relay<F: BrokerFixture>(
    ctx: &Ctx,
    fx: &F,
    extra: &[&str],
    env: &[(&str, &str)],
) -> RelayProcess {
    let mut args = fx.relay_args();
    args.extend(extra.iter().map(|s| s.to_string()));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut all_env = fx.relay_env();
    all_env.extend_from_slice(env);
    ctx.relay("redis://127.0.0.1:1", &args, &all_env)
}

/// A valid W3C trace parent, different for each `i`.
pub fn traceparent(i: usize) -> String {
    format!("00-4bf92f3577b34da6a3ce929d0e{i:06x}-00f067aa0ba902b7-01")
}

/// Outbox rows by event id.
async fn rows(ctx: &Ctx) -> HashMap<String, Row> {
    sqlx::query_as::<_, (String, String, String, Value, Value)>(&format!(
        "SELECT event_id::text, topic, key, payload, headers FROM {}.outbox",
        ctx.schema
    ))
    .fetch_all(&ctx.pool)
    .await
    .unwrap()
    .into_iter()
    .map(|(id, topic, key, payload, headers)| {
        let seq = payload["seq"].as_i64().unwrap_or(0);
        let row = Row {
            topic,
            key,
            seq,
            payload,
            headers,
        };
        (id, row)
    })
    .collect()
}

/// What every sink carries: the key, the event type, the payload intact,
/// and each of the row's headers as text; then the fixture's own mapping.
fn check<F: BrokerFixture>(fx: &F, m: &Arrived, row: &Row) {
    assert_eq!(m.key.as_deref(), Some(row.key.as_str()), "key: {m:?}");
    assert_eq!(m.event.as_deref(), Some("test.event"), "event: {m:?}");
    assert_eq!(m.payload, row.payload, "payload intact: {m:?}");
    for (name, value) in row.headers.as_object().into_iter().flatten() {
        assert_eq!(m.headers.get(name), Some(value), "header {name}: {m:?}");
    }
    fx.check(m, row);
}

/// Wait until every row is sent, showing the relays' output if they do not.
async fn all_sent(ctx: &Ctx, relays: &[&RelayProcess]) {
    let deadline = Instant::now() + LONG;
    while ctx.unsent().await > 0 {
        if Instant::now() > deadline {
            let out: Vec<String> = relays.iter().map(|r| r.output()).collect();
            panic!(
                "every row sent within {LONG:?}: {} unsent, {:?} dead\n{}",
                ctx.unsent().await,
                ctx.dead_letters().await,
                out.join("\n---\n")
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// 1,000 events over 16 keys (fewer where the broker is slow), each with its
/// trace context, committed 50 to a transaction; two relays, one SIGKILLed
/// mid-stream and a third started: every event read back with its fields,
/// first occurrences in key order, and each exactly once where the broker
/// drops re-sends.
pub async fn events_arrive_once_and_in_key_order_through_relay_kills<F: BrokerFixture>() {
    let ctx = Ctx::new(F::NAME).await;
    let fx = F::start(&ctx.queue, Broker::Shared).await;
    fx.create_topic(&ctx.queue).await;
    let n = F::KILL_EVENTS;
    let events: Vec<Event> = (0..n)
        .map(|i| {
            ctx.event(&format!("k{}", i % 16), i / 16 + 1)
                .traceparent(traceparent(i))
        })
        .collect();
    for chunk in events.chunks(50) {
        let mut tx = ctx.pool.begin().await.unwrap();
        ctx.outbox
            .enqueue_many(&mut tx, chunk.to_vec())
            .await
            .unwrap();
        tx.commit().await.unwrap();
    }
    let mut doomed = relay(&ctx, &fx, F::KILL_FLAGS, &[]);
    let r2 = relay(&ctx, &fx, F::KILL_FLAGS, &[]);
    wait_until(LONG, "some events relayed", || async {
        ctx.unsent().await < (n as i64) * 3 / 4
    })
    .await;
    doomed.signal("KILL");
    doomed.wait(LONG).await;
    let r3 = relay(&ctx, &fx, F::KILL_FLAGS, &[]);
    all_sent(&ctx, &[&r2, &r3]).await;

    let seen = fx.read(&ctx.queue, n).await;
    let rows = rows(&ctx).await;
    let mut first = FirstOccurrences::default();
    for m in &seen {
        let row = rows
            .get(&m.id)
            .expect("the message's id is an outbox event id");
        check(&fx, m, row);
        first.see(&m.id, &row.key, row.seq);
    }
    assert_eq!(first.distinct(), n, "every event at least once");
    if F::DROPS_RESENDS {
        assert_eq!(seen.len(), n, "the broker dropped the relays' re-sends");
    }
    println!(
        "{} order/kill: {n} events, {} messages read, {} duplicates",
        F::NAME,
        seen.len(),
        seen.len() - n
    );
    drop((r2, r3));
    fx.cleanup().await;
    ctx.cleanup().await;
}

pub async fn refusals_are_dead_lettered_while_other_keys_flow<F: BrokerFixture>() {
    refusals::<F>("mark").await;
}

/// With `sent = "delete"` the claim deletes every row it takes: the refused
/// ones must come back (the batch is rolled back, then the sent ones
/// deleted) to be retried and dead-lettered.
pub async fn refusals_are_dead_lettered_when_sent_rows_are_deleted<F: BrokerFixture>() {
    refusals::<F>("delete").await;
}

/// The fixture's refusals spread among 40 good events over 8 keys (so they
/// share batches and waves with good ones), then one good event for each
/// refused key: each refused event is dead-lettered saying why, every good
/// one is read back once, and none of the refused.
async fn refusals<F: BrokerFixture>(sent: &str) {
    let ctx = Ctx::new(F::NAME).await;
    let fx = F::start(&ctx.queue, Broker::Shared).await;
    fx.create_topic(&ctx.queue).await;
    let refusals = fx.refusals(&ctx.queue).await;
    let refused: Vec<(Event, &[String])> = refusals
        .iter()
        .map(|r| {
            let payload = serde_json::json!({"key": r.key, "seq": 1, "pad": "x".repeat(r.pad)});
            let event = Event::new(&r.topic, "test.event", payload).key(&r.key);
            (event, r.error.as_slice())
        })
        .collect();
    let good: Vec<Event> = (1..=5)
        .flat_map(|i| ["a", "b", "c", "d", "e", "f", "g", "h"].map(|k| ctx.event(k, i)))
        .collect();
    let mut events: Vec<(Event, Option<&[String]>)> = Vec::new();
    let spread = (good.len() / refused.len().max(1)).max(1);
    let mut refused = refused.into_iter();
    for (i, e) in good.into_iter().enumerate() {
        events.push((e, None));
        if i % spread == spread - 1 {
            events.extend(refused.next().map(|(e, error)| (e, Some(error))));
        }
    }
    events.extend(refused.map(|(e, error)| (e, Some(error))));
    let keys: HashSet<&str> = refusals.iter().map(|r| r.key.as_str()).collect();
    events.extend(keys.iter().map(|k| (ctx.event(k, 2), None)));
    let (mut expected, mut good_ids) = (HashMap::new(), HashSet::new());
    for (e, error) in events {
        let mut tx = ctx.pool.begin().await.unwrap();
        let id = ctx.outbox.enqueue(&mut tx, e).await.unwrap().event_id;
        tx.commit().await.unwrap();
        if let Some(error) = error {
            expected.insert(id.to_string(), error);
        } else {
            good_ids.insert(id.to_string());
        }
    }
    assert_eq!(expected.len(), refusals.len(), "every refusal produced");

    let mut args: Vec<String> = FAST_DEAD_LETTER.iter().map(|s| s.to_string()).collect();
    args.extend(["--sent".into(), sent.into()]);
    args.extend(fx.refusal_flags());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let relay = relay(&ctx, &fx, &args, &[]);
    all_sent(&ctx, &[&relay]).await;
    wait_until(LONG, "every refusal dead-lettered", || async {
        ctx.dead_letters().await.len() >= expected.len()
    })
    .await;
    let dead = ctx.dead_letters().await;
    assert_eq!(dead.len(), expected.len(), "{dead:?}");
    for (id, error) in &dead {
        let words = expected.get(id).expect("only refused events dead-lettered");
        for w in *words {
            assert!(error.contains(w.as_str()), "{w:?} not in {error:?}");
        }
    }
    let seen = fx.read(&ctx.queue, good_ids.len()).await;
    let ids: HashSet<String> = seen.iter().map(|m| m.id.clone()).collect();
    assert_eq!(ids, good_ids, "every good event, none of the refused");
    assert_eq!(seen.len(), good_ids.len(), "each good event once");
    let left: i64 = sqlx::query_scalar(&format!("SELECT count(*) FROM {}.outbox", ctx.schema))
        .fetch_one(&ctx.pool)
        .await
        .unwrap();
    let kept = if sent == "delete" { 0 } else { good_ids.len() };
    assert_eq!(left, kept as i64, "outbox rows left with sent = {sent}");
    drop(relay);
    fx.cleanup().await;
    ctx.cleanup().await;
}

/// A plain-SQL producer's malformed `traceparent` is not checked at enqueue:
/// the relay drops it (and its `tracestate`), says so, and delivers the
/// event with its other headers as text.
pub async fn headers_arrive_as_text_and_a_malformed_trace_context_is_dropped<F: BrokerFixture>() {
    let ctx = Ctx::new(F::NAME).await;
    let fx = F::start(&ctx.queue, Broker::Shared).await;
    fx.create_topic(&ctx.queue).await;
    sqlx::query(&format!(
        "INSERT INTO {}.outbox (topic, event, key, payload, headers) VALUES ($1, 'test.event', 'k', \
         '{{\"key\": \"k\", \"seq\": 1}}', \
         '{{\"traceparent\": \"garbage\", \"tracestate\": \"a=b\", \"x-num\": 42, \"x-text\": \"v\"}}')",
        ctx.schema
    ))
    .bind(&ctx.queue)
    .execute(&ctx.pool)
    .await
    .unwrap();
    let relay = relay(&ctx, &fx, &[], &[]);
    all_sent(&ctx, &[&relay]).await;
    assert!(ctx.dead_letters().await.is_empty());
    let seen = fx.read(&ctx.queue, 1).await;
    let h = &seen[0].headers;
    assert!(
        h.get("traceparent").is_none() && h.get("tracestate").is_none(),
        "{h:?}"
    );
    assert_eq!(h.get("x-num"), Some(&Value::from("42")), "{h:?}");
    assert_eq!(h.get("x-text"), Some(&Value::from("v")), "{h:?}");
    assert_eq!(seen[0].payload, serde_json::json!({"key": "k", "seq": 1}));
    relay.wait_for_line("without its trace context", LONG).await;
    drop(relay);
    fx.cleanup().await;
    ctx.cleanup().await;
}

/// 100 events sent, the broker SIGKILLed, 100 more produced: over three
/// failed passes the rows wait with no attempt counted; after the restart
/// all are sent, nothing dead-lettered, and the broker holds every event
/// (those of the outage, where it keeps nothing across a restart) in key order.
pub async fn a_killed_broker_costs_no_attempts_and_loses_nothing<F: KillableBroker>() {
    let ctx = Ctx::new(F::NAME).await;
    let mut fx = F::start(&ctx.queue, Broker::Own).await;
    fx.create_topic(&ctx.queue).await;
    let relay = relay(&ctx, &fx, &[], &[]);
    let produce = |from: usize| {
        (from..from + 100)
            .map(|i| ctx.event(&format!("k{}", i % 8), i / 8 + 1))
            .collect::<Vec<_>>()
    };
    ctx.produce(produce(0)).await;
    all_sent(&ctx, &[&relay]).await;
    fx.kill();
    ctx.produce(produce(100)).await;
    wait_until(
        LONG,
        "three failed passes against the dead broker",
        || async { relay.output().matches("broker unavailable").count() >= 3 },
    )
    .await;
    assert_eq!(ctx.max_attempts().await, 0, "an outage costs no attempts");
    assert!(ctx.dead_letters().await.is_empty());
    assert_eq!(ctx.unsent().await, 100);
    fx.restart().await;
    all_sent(&ctx, &[&relay]).await;
    let dead = ctx.dead_letters().await;
    assert!(dead.is_empty(), "{dead:?}\n{}", relay.output());

    let kept = if F::KEEPS_MESSAGES { 200 } else { 100 };
    let seen = fx.read(&ctx.queue, kept).await;
    let rows = rows(&ctx).await;
    let mut first = FirstOccurrences::default();
    if !F::KEEPS_MESSAGES {
        // Each key's first occurrences continue after what was lost.
        for i in 92..100 {
            first.after(&format!("k{}", i % 8), (i / 8 + 1) as i64);
        }
    }
    for m in &seen {
        let row = rows
            .get(&m.id)
            .expect("the message's id is an outbox event id");
        check(&fx, m, row);
        first.see(&m.id, &row.key, row.seq);
    }
    assert_eq!(first.distinct(), kept, "every event stored, none lost");
    if F::DROPS_RESENDS {
        assert_eq!(seen.len(), kept, "each event stored once");
    }
    drop(relay);
    fx.cleanup().await;
    ctx.cleanup().await;
}

/// The crash tests' start: `<schema>.effects`, `n` events of key "k" with
/// their trace context, a relay, and everything sent.
async fn consumer_test<F: ConsumerFixture>(n: usize) -> (Ctx, F, RelayProcess, InboxConsumer) {
    let ctx = Ctx::new(F::NAME).await;
    let fx = F::start(&ctx.queue, Broker::Shared).await;
    fx.create_topic(&ctx.queue).await;
    ctx.effects_table().await;
    ctx.produce(
        (1..=n)
            .map(|i| ctx.event("k", i).traceparent(traceparent(i)))
            .collect(),
    )
    .await;
    let relay = relay(&ctx, &fx, &[], &[]);
    all_sent(&ctx, &[&relay]).await;
    let inbox = InboxConsumer::new(
        ctx.pool.clone(),
        postbox::Inbox::new(&ctx.schema).unwrap(),
        "effects",
    );
    (ctx, fx, relay, inbox)
}

/// A consumer dies between its inbox commit of the fifth message and its
/// acknowledgement; ten more events are published; a second consumer
/// applies every effect once with its trace context, skips the redelivery,
/// and (where the broker keeps order for a consumer) in order.
pub async fn inbox_consumer_applies_each_message_once_across_a_crash<F: ConsumerFixture>() {
    let (ctx, fx, relay, inbox) = consumer_test::<F>(20).await;
    let fifth = ctx.nth_event_id(5).await;
    let first = Effects::new(&ctx.schema, Some(fifth));
    let task = tokio::spawn(fx.consume(&ctx.queue, consumer(&inbox, &first, 1, &stop())));
    tokio::time::timeout(LONG, first.hung.notified())
        .await
        .expect("the first consumer reached the 5th message");
    task.abort();
    let _ = task.await;
    // A consumer that had been handed messages 6-20 would leave them
    // waiting (out an ack wait, a visibility timeout) while these take effect.
    ctx.produce(
        (21..=30)
            .map(|i| ctx.event("k", i).traceparent(traceparent(i)))
            .collect(),
    )
    .await;
    all_sent(&ctx, &[&relay]).await;
    let second = Effects::new(&ctx.schema, None);
    let stop = stop();
    let consume = fx.consume(&ctx.queue, consumer(&inbox, &second, 2, &stop));
    recovers_once(&ctx, &second, 30, &stop, consume).await;
    let traced: i64 = sqlx::query_scalar(&format!(
        "SELECT count(*) FROM {0}.effects e JOIN {0}.outbox o ON o.event_id::text = e.message_id
          WHERE e.traceparent = o.headers->>'traceparent'",
        ctx.schema
    ))
    .fetch_one(&ctx.pool)
    .await
    .unwrap();
    assert_eq!(traced, 30, "the handler saw each event's trace context");
    if F::KEEPS_ORDER {
        let rows = rows(&ctx).await;
        let applied: Vec<String> = sqlx::query_scalar(&format!(
            "SELECT message_id FROM {}.effects ORDER BY n",
            ctx.schema
        ))
        .fetch_all(&ctx.pool)
        .await
        .unwrap();
        let order: Vec<i64> = applied.iter().map(|id| rows[id].seq).collect();
        assert_eq!(order, (1..=30).collect::<Vec<_>>(), "effects in order");
    }
    drop(relay);
    fx.cleanup().await;
    ctx.cleanup().await;
}

/// A relay dies between publishing a batch and committing it; the next
/// sends the batch again. The consumer applies each of the ten effects once:
/// the broker dropped the re-sends, or the inbox skips all ten.
pub async fn inbox_consumer_skips_the_re_send_of_a_relay_killed_before_its_commit<
    F: ConsumerFixture,
>() {
    let ctx = Ctx::new(F::NAME).await;
    let fx = F::start(&ctx.queue, Broker::Shared).await;
    fx.create_topic(&ctx.queue).await;
    ctx.effects_table().await;
    ctx.produce((1..=10).map(|i| ctx.event("k", i)).collect())
        .await;
    let failpoint = [("POSTBOX_FAILPOINT", "after_publish")];
    let mut doomed = relay(&ctx, &fx, &["--workers", "1"], &failpoint);
    doomed.wait_for_line("failpoint after_publish", LONG).await;
    doomed.signal("KILL");
    doomed.wait(LONG).await;
    assert_eq!(ctx.unsent().await, 10, "published, not committed");
    let relay = relay(&ctx, &fx, &[], &[]);
    all_sent(&ctx, &[&relay]).await;

    let effects = Effects::new(&ctx.schema, None);
    let stop = stop();
    let inbox = InboxConsumer::new(
        ctx.pool.clone(),
        postbox::Inbox::new(&ctx.schema).unwrap(),
        "effects",
    );
    let re_sent = if F::DROPS_RESENDS { 0 } else { 10 };
    let judge = async {
        wait_until(LONG, "every effect, the re-sends skipped", || async {
            ctx.effects().await == 10 && effects.duplicates() >= re_sent
        })
        .await;
        stop.cancel();
    };
    let consume = fx.consume(&ctx.queue, consumer(&inbox, &effects, 1, &stop));
    let (consumed, ()) = tokio::join!(consume, judge);
    consumed.unwrap();
    assert_eq!(ctx.distinct_effects().await, 10, "each effect once");
    assert_eq!(
        effects.duplicates(),
        re_sent,
        "re-sends that reached the inbox"
    );
    drop(relay);
    fx.cleanup().await;
    ctx.cleanup().await;
}

/// Inserts each message's effect; holds the `hold_at`-th handled message
/// inside its transaction until the test has crashed PostgreSQL.
struct HeldEffects {
    insert: String,
    handled: AtomicUsize,
    hold_at: usize,
    holding: tokio::sync::Notify,
    release: tokio::sync::Notify,
}

impl Handler for HeldEffects {
    async fn handle(
        &self,
        tx: &mut sqlx::PgConnection,
        msg: &postbox::Message,
    ) -> Result<(), BoxError> {
        sqlx::query(&self.insert)
            .bind(&msg.id)
            .execute(&mut *tx)
            .await?;
        if self.handled.fetch_add(1, SeqCst) + 1 == self.hold_at {
            self.holding.notify_one();
            self.release.notified().await;
        }
        Ok(())
    }
}

/// The consumer's PostgreSQL (a cluster of the test's own) is crashed
/// while the 12th of 30 messages is inside its transaction, and comes back:
/// the consumer keeps running and applies each message once.
pub async fn inbox_consumer_survives_a_postgresql_crash<F: ConsumerFixture>() {
    let (ctx, fx, relay, _) = consumer_test::<F>(30).await;
    let pg = postbox_testkit::PgCluster::start().await.unwrap();
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(2)
        .acquire_timeout(Duration::from_secs(2))
        .connect(&pg.url())
        .await
        .unwrap();
    let schema = postbox::SchemaName::new("consumer_side").unwrap();
    let mut conn = pool.acquire().await.unwrap();
    postbox::migrate::run(&mut conn, &schema, Default::default())
        .await
        .unwrap();
    drop(conn);
    sqlx::raw_sql("CREATE TABLE consumer_side.effects (message_id text NOT NULL)")
        .execute(&pool)
        .await
        .unwrap();
    let effects = Arc::new(HeldEffects {
        insert: "INSERT INTO consumer_side.effects VALUES ($1)".into(),
        handled: AtomicUsize::new(0),
        hold_at: 12,
        holding: tokio::sync::Notify::new(),
        release: tokio::sync::Notify::new(),
    });
    let inbox = InboxConsumer::new(
        pool.clone(),
        postbox::Inbox::new("consumer_side").unwrap(),
        "effects",
    );
    let stop = stop();
    let task = tokio::spawn(fx.consume(&ctx.queue, consumer(&inbox, &effects, 1, &stop)));
    // The 12th message is inside its transaction: crash the server under it,
    // so its COMMIT fails and the following messages find no database.
    tokio::time::timeout(LONG, effects.holding.notified())
        .await
        .expect("the consumer reached the 12th message");
    pg.stop_immediate().await.unwrap();
    effects.release.notify_one();
    pg.up().await.unwrap();
    let count = |sql: &'static str| {
        let pool = pool.clone();
        async move {
            sqlx::query_scalar::<_, i64>(sql)
                .fetch_one(&pool)
                .await
                .unwrap_or(-1)
        }
    };
    wait_until(LONG, "all 30 effects committed", || async {
        count("SELECT count(DISTINCT message_id) FROM consumer_side.effects").await == 30
    })
    .await;
    assert_eq!(
        count("SELECT count(*) FROM consumer_side.effects").await,
        30,
        "no effect applied twice"
    );
    assert!(
        !task.is_finished(),
        "the consumer kept running through the outage"
    );
    stop.cancel();
    task.await.unwrap().unwrap();
    drop(relay);
    fx.cleanup().await;
    ctx.cleanup().await;
}

fn stop() -> CancellationToken {
    CancellationToken::new()
}

fn consumer<H>(
    inbox: &InboxConsumer,
    h: &Arc<H>,
    n: usize,
    stop: &CancellationToken,
) -> Consume<H> {
    Consume {
        inbox: inbox.clone(),
        handler: h.clone(),
        n,
        stop: stop.clone(),
    }
}
