//! The consumer side's retry policy and dead letters, for every consumer
//! wrapper: a handler that fails twice then succeeds is applied once; one that
//! keeps failing is dead-lettered after its attempts while the rest flows,
//! `postbox inbox-dlq` lists it, and after the fix a replay applies it once.

use crate::dlq::cli;
use crate::support::*;
use postbox::{BoxError, Handler, Message, RetryPolicy};
use serde_json::Value;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// Records `(key, seq)` of each message; seq 2 fails on its first two runs
/// (a passing fault), seq 3 fails while `broken` (a bug, fixed later).
struct Flaky {
    insert: String,
    broken: AtomicBool,
    runs: Mutex<HashMap<u64, usize>>,
}

impl Flaky {
    fn new(schema: &str) -> Arc<Flaky> {
        Arc::new(Flaky {
            insert: format!("INSERT INTO {schema}.effects (key, seq) VALUES ($1, $2)"),
            broken: AtomicBool::new(true),
            runs: Mutex::new(HashMap::new()),
        })
    }
    fn runs(&self, seq: u64) -> usize {
        self.runs.lock().unwrap().get(&seq).copied().unwrap_or(0)
    }
}

impl Handler for Flaky {
    async fn handle(&self, tx: &mut sqlx::PgConnection, msg: &Message) -> Result<(), BoxError> {
        let v: Value = msg.json()?;
        let seq = v["seq"].as_u64().ok_or("no seq")?;
        sqlx::query(&self.insert)
            .bind(v["key"].as_str())
            .bind(seq as i64)
            .execute(&mut *tx)
            .await?;
        let run = {
            let mut runs = self.runs.lock().unwrap();
            let n = runs.entry(seq).or_default();
            *n += 1;
            *n
        };
        if seq == 2 && run <= 2 {
            return Err(format!("passing fault, run {run}").into());
        }
        if seq == 3 && self.broken.load(SeqCst) {
            return Err("cannot parse the order (bug 42)".into());
        }
        Ok(())
    }
}

const ATTEMPTS: u32 = 3;

fn consumer(ctx: &Ctx, name: &str) -> postbox::InboxConsumer {
    postbox::InboxConsumer::new(
        ctx.pool.clone(),
        postbox::Inbox::new(&ctx.schema).unwrap(),
        name,
    )
    .retry(RetryPolicy {
        attempts: ATTEMPTS,
        backoff_min: Duration::from_millis(20),
        backoff_max: Duration::from_millis(100),
    })
    .replay_poll(Duration::from_millis(100))
}

async fn prepare(ctx: &Ctx) {
    sqlx::raw_sql(&format!(
        "CREATE TABLE {}.effects (key text NOT NULL, seq bigint NOT NULL)",
        ctx.schema
    ))
    .execute(&ctx.pool)
    .await
    .unwrap();
    ctx.produce((1..=5).map(|i| ctx.event("k", i)).collect())
        .await;
}

async fn effects(ctx: &Ctx) -> Vec<i64> {
    sqlx::query_scalar(&format!(
        "SELECT seq FROM {}.effects ORDER BY seq",
        ctx.schema
    ))
    .fetch_all(&ctx.pool)
    .await
    .unwrap()
}

async fn inbox_dlq(ctx: &Ctx, args: &[&str]) -> String {
    let url = postbox_testkit::database_url();
    let mut all = vec![
        args[0],
        args[1],
        "--database-url",
        &url,
        "--schema",
        &ctx.schema,
    ];
    all.extend_from_slice(&args[2..]);
    let (ok, out, err) = cli(&all).await;
    assert!(ok, "postbox {all:?} failed:\n{out}{err}");
    out
}

/// What both wrappers must show once the consumer runs: 1, 2, 4, 5 applied
/// once each (2 after two failures), 3 a dead letter after ATTEMPTS runs and
/// listed; fixed and replayed, 3 applied once and the dead letter gone.
async fn judge(ctx: &Ctx, h: &Flaky, name: &str) {
    wait_until(LONG, "1, 2, 4, 5 applied and 3 dead-lettered", || async {
        effects(ctx).await == vec![1, 2, 4, 5]
            && sqlx::query_scalar::<_, i64>(&format!(
                "SELECT count(*) FROM {}.inbox_dead_letter",
                ctx.schema
            ))
            .fetch_one(&ctx.pool)
            .await
            .unwrap()
                == 1
    })
    .await;
    assert_eq!(h.runs(2), 3, "seq 2: two failures, then applied");
    assert_eq!(h.runs(3), ATTEMPTS as usize, "seq 3: every attempt used");

    let listed: Value =
        serde_json::from_str(&inbox_dlq(ctx, &["inbox-dlq", "list", "--json"]).await).unwrap();
    let row = &listed[0];
    assert_eq!(row["consumer"], name);
    assert_eq!(row["attempts"], ATTEMPTS);
    assert_eq!(row["payload"]["seq"], 3, "{row}");
    assert_eq!(row["name"], "test.event");
    assert!(
        row["last_error"].as_str().unwrap().contains("bug 42"),
        "{row}"
    );
    let table = inbox_dlq(ctx, &["inbox-dlq", "list"]).await;
    assert!(table.contains(name) && table.contains("bug 42"), "{table}");

    // Without a filter, a replay is refused; a dry run changes nothing.
    let url = postbox_testkit::database_url();
    let (ok, _, err) = cli(&[
        "inbox-dlq",
        "replay",
        "--database-url",
        &url,
        "--schema",
        &ctx.schema,
        "--yes",
    ])
    .await;
    assert!(!ok && err.contains("--all"), "{err}");
    let dry = inbox_dlq(ctx, &["inbox-dlq", "replay", "--consumer", name]).await;
    assert!(dry.contains("dry run: would replay 1"), "{dry}");

    h.broken.store(false, SeqCst);
    let out = inbox_dlq(ctx, &["inbox-dlq", "replay", "--consumer", name, "--yes"]).await;
    assert!(out.contains("asked for a replay of 1"), "{out}");
    wait_until(LONG, "the replayed message applied", || async {
        effects(ctx).await == vec![1, 2, 3, 4, 5]
    })
    .await;
    let left = inbox_dlq(ctx, &["inbox-dlq", "list"]).await;
    assert!(left.contains("no consumer dead letters"), "{left}");
    // Once: a second replay request finds nothing to do.
    let again = inbox_dlq(ctx, &["inbox-dlq", "replay", "--all", "--yes"]).await;
    assert!(again.contains("nothing to replay"), "{again}");
    assert_eq!(effects(ctx).await, vec![1, 2, 3, 4, 5]);
    assert_eq!(
        crate::dlq::audit(ctx).await,
        [("consumer_dead_letters.replay".into(), 1)],
        "the CLI's replay audited; the refused and empty ones not"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bullmq_consumer_retries_then_dead_letters_and_replays_once() {
    let ctx = Ctx::new("cfail_b").await;
    prepare(&ctx).await;
    let relay = ctx.relay(&postbox_testkit::redis_url(), &[], &[]);
    let h = Flaky::new(&ctx.schema);
    let stop = CancellationToken::new();
    let worker = postbox_bullmq::inbox_worker(
        consumer(&ctx, "orders"),
        &ctx.queue,
        h.clone(),
        postbox_bullmq::worker_options(&postbox_testkit::redis_url()),
        stop.clone(),
    )
    .await
    .unwrap();
    let running = tokio::spawn(worker.run());
    judge(&ctx, &h, "orders").await;
    stop.cancel();
    running.await.unwrap().unwrap();
    drop(relay);
    ctx.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_consumer_retries_then_dead_letters_and_replays_once() {
    let ctx = Ctx::new("cfail_k").await;
    let broker = postbox_testkit::KafkaBroker::start().await;
    broker.create_topic(&ctx.queue, 1);
    prepare(&ctx).await;
    let relay = crate::kafka::relay(&ctx, &broker, &[], &[]);
    let h = Flaky::new(&ctx.schema);
    let stop = CancellationToken::new();
    let running = {
        let (c, kafka, h, stop) = (
            consumer(&ctx, "orders-k"),
            crate::kafka::stream_consumer(&broker, &format!("g-{}", ctx.schema), &ctx.queue),
            h.clone(),
            stop.clone(),
        );
        tokio::spawn(async move { postbox_kafka::inbox_consumer(&c, &kafka, &*h, stop).await })
    };
    judge(&ctx, &h, "orders-k").await;
    stop.cancel();
    running.await.unwrap().unwrap();
    drop(relay);
    ctx.cleanup().await;
}

/// `enqueue` into a schema nobody migrated says what to run, not the server's
/// `relation "x.outbox" does not exist`.
#[tokio::test]
async fn enqueue_into_an_unmigrated_schema_says_to_migrate() {
    let pool = postbox_testkit::pool().await;
    let outbox = postbox::Outbox::new("never_migrated_x").unwrap();
    let mut tx = pool.begin().await.unwrap();
    let err = outbox
        .enqueue(&mut tx, event("q", "k", 1))
        .await
        .unwrap_err();
    assert!(
        matches!(err, postbox::EnqueueError::SchemaNotMigrated { .. }),
        "{err:?}"
    );
    assert!(!err.is_transient());
    assert!(
        err.to_string()
            .contains("run `postbox migrate --schema never_migrated_x`"),
        "{err}"
    );
    let inbox = postbox::Inbox::new("never_migrated_x").unwrap();
    let mut tx = pool.begin().await.unwrap();
    let err = inbox.receive(&mut tx, "c", "m").await.unwrap_err();
    assert!(
        matches!(err, postbox::InboxError::SchemaNotMigrated { .. }),
        "{err:?}"
    );
}

/// Fails every run, permanently (a payload that will never deserialize).
struct NeverValid {
    runs: Mutex<usize>,
}

impl Handler for NeverValid {
    async fn handle(&self, _tx: &mut sqlx::PgConnection, msg: &Message) -> Result<(), BoxError> {
        *self.runs.lock().unwrap() += 1;
        #[derive(serde::Deserialize)]
        #[allow(dead_code)]
        struct Order {
            id: i64,
        }
        let _order: Order = msg.json().map_err(postbox::Permanent::new)?;
        Ok(())
    }
}

/// A handler that says "do not retry" (`postbox::Permanent`) is run once and
/// its message dead-lettered at once, its cause kept, though the policy would
/// run it five times a minute apart.
#[tokio::test]
async fn a_permanent_failure_is_dead_lettered_after_one_run() {
    let ctx = Ctx::new("permanent").await;
    let consumer = postbox::InboxConsumer::new(
        ctx.pool.clone(),
        postbox::Inbox::new(&ctx.schema).unwrap(),
        "orders",
    )
    .retry(RetryPolicy {
        attempts: 5,
        backoff_min: Duration::from_secs(60),
        backoff_max: Duration::from_secs(60),
    });
    let mut msg = Message::new("m-1", &ctx.queue);
    msg.payload = br#"{"amount": 5}"#.to_vec();
    let handler = NeverValid {
        runs: Mutex::new(0),
    };
    let done = tokio::time::timeout(
        Duration::from_secs(20),
        consumer.process(&msg, &handler, &CancellationToken::new()),
    )
    .await
    .expect("no retry wait")
    .unwrap();
    assert_eq!(done, postbox::Processed::DeadLettered);
    assert_eq!(*handler.runs.lock().unwrap(), 1);
    let (attempts, error): (i32, String) = sqlx::query_as(&format!(
        "SELECT attempts, last_error FROM {}.inbox_dead_letter WHERE message_id = 'm-1'",
        ctx.schema
    ))
    .fetch_one(&ctx.pool)
    .await
    .unwrap();
    assert_eq!(attempts, 1);
    assert!(
        error.contains("permanent failure (not retried)") && error.contains("missing field `id`"),
        "{error}"
    );
    ctx.cleanup().await;
}
