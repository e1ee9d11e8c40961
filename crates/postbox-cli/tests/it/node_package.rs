//! The npm package (clients/node) against the Rust side, with the real
//! PostgreSQL, Redis and relay binary: events a Node service enqueues are
//! consumed exactly once by the Rust inbox worker, and events a Rust service
//! enqueues by the Node inboxWorker, both across a relay SIGKILL, in per-key
//! order. Also runs the package's own `node:test` suite.
//!
//! Needs clients/node built (`./scripts/test.sh` runs `npm ci` and `npm run build` there).

use crate::support::*;
use postbox_bullmq::bullmq::options::RedisConnectionOptions;
use postbox_bullmq::bullmq::WorkerOptions;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::AsyncBufReadExt;

const WAIT: Duration = Duration::from_secs(60);
const KEYS: usize = 5;

fn package_dir() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../clients/node"))
}

fn require_built_package() {
    if !package_dir().join("dist/esm/index.js").is_file() {
        panic!("clients/node is not built: run ./scripts/test.sh (it runs `npm ci` and `npm run build` there)");
    }
}

pub(crate) fn node_cmd(args: &[&str]) -> tokio::process::Command {
    require_built_package();
    let mut cmd = tokio::process::Command::new("node");
    cmd.args(args)
        .current_dir(package_dir())
        .env("DATABASE_URL", postbox_testkit::database_url())
        .env("REDIS_URL", postbox_testkit::redis_url())
        .env("POSTBOX_BIN", BIN)
        .stdin(Stdio::null())
        .kill_on_drop(true);
    cmd
}

/// Ask a Node peer to close gracefully.
fn sigterm(child: &tokio::process::Child) {
    let pid = child.id().expect("still running").to_string();
    let status = std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap();
    assert!(status.success(), "kill -TERM {pid}");
}

/// `node test/interop/produce.mjs`: `count` events from `from`, ten per transaction.
async fn node_produce(ctx: &Ctx, from: usize, count: usize) {
    let out = node_cmd(&[
        "test/interop/produce.mjs",
        &ctx.schema,
        &ctx.queue,
        &from.to_string(),
        &count.to_string(),
        &KEYS.to_string(),
    ])
    .output()
    .await
    .expect("run node");
    assert!(
        out.status.success(),
        "produce.mjs failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// An effects table with no unique constraint: an effect applied twice shows as two rows.
async fn effects_table(ctx: &Ctx) {
    sqlx::raw_sql(&format!(
        "CREATE TABLE {}.effects (event_id text NOT NULL, key text NOT NULL, seq bigint NOT NULL, at bigserial)",
        ctx.schema
    ))
    .execute(&ctx.pool)
    .await
    .unwrap();
}

async fn effect_count(ctx: &Ctx) -> i64 {
    sqlx::query_scalar(&format!("SELECT count(*) FROM {}.effects", ctx.schema))
        .fetch_one(&ctx.pool)
        .await
        .unwrap()
}

/// Every outbox event's effect exactly once, and each key's in sequence order.
async fn assert_once_in_key_order(ctx: &Ctx, expected: i64) {
    let rows: Vec<(String, String, i64)> = sqlx::query_as(&format!(
        "SELECT event_id, key, seq FROM {}.effects ORDER BY at",
        ctx.schema
    ))
    .fetch_all(&ctx.pool)
    .await
    .unwrap();
    let mut last = std::collections::HashMap::new();
    for (_, key, seq) in &rows {
        let prev = last.insert(key.clone(), *seq).unwrap_or(-1);
        assert!(prev < *seq, "key {key}: {seq} applied after {prev}");
    }
    assert_eq!(
        rows.len() as i64,
        expected,
        "one effect per event, none twice"
    );
    let ids: std::collections::HashSet<String> =
        sqlx::query_scalar(&format!("SELECT event_id::text FROM {}.outbox", ctx.schema))
            .fetch_all(&ctx.pool)
            .await
            .unwrap()
            .into_iter()
            .collect();
    let applied: std::collections::HashSet<String> = rows.into_iter().map(|r| r.0).collect();
    assert_eq!(applied, ids, "the effects are the outbox's events");
}

/// Deliver the first batch, SIGKILL the relay once some went out, produce
/// more, restart it, and wait for every effect and an empty backlog.
async fn across_a_relay_kill<F, Fut>(ctx: &Ctx, produce: F)
where
    F: Fn(usize, usize) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    produce(0, 200).await;
    let relay = ctx.relay(&postbox_testkit::redis_url(), &[], &[]);
    wait_until(WAIT, "the first effects", || async {
        effect_count(ctx).await >= 20
    })
    .await;
    relay.signal("KILL");
    drop(relay);
    produce(200, 100).await;
    let relay = ctx.relay(&postbox_testkit::redis_url(), &[], &[]);
    wait_until(WAIT, "all 300 effects", || async {
        effect_count(ctx).await >= 300
    })
    .await;
    wait_until(WAIT, "an empty backlog", || async {
        ctx.unsent().await == 0
    })
    .await;
    drop(relay);
}

struct Effects {
    table: String,
}

impl postbox_bullmq::Handler for Effects {
    async fn handle(
        &self,
        tx: &mut sqlx::PgConnection,
        msg: &postbox_bullmq::Message,
    ) -> Result<(), postbox_bullmq::BoxError> {
        let data: serde_json::Value = msg.json()?;
        sqlx::query(&format!(
            "INSERT INTO {} (event_id, key, seq) VALUES ($1, $2, $3)",
            self.table
        ))
        .bind(&msg.id)
        .bind(data["key"].as_str())
        .bind(data["seq"].as_i64())
        .execute(&mut *tx)
        .await?;
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_produced_events_reach_the_rust_inbox_worker_once_in_key_order_across_a_relay_kill() {
    let ctx = Ctx::new("npm_to_rust").await;
    effects_table(&ctx).await;
    let shutdown = tokio_util::sync::CancellationToken::new();
    let worker = postbox_bullmq::inbox_worker(
        postbox::InboxConsumer::new(
            ctx.pool.clone(),
            postbox::Inbox::new(&ctx.schema).unwrap(),
            "rust-consumer",
        ),
        &ctx.queue,
        Arc::new(Effects {
            table: format!("{}.effects", ctx.schema),
        }),
        WorkerOptions {
            connection: RedisConnectionOptions {
                url: postbox_testkit::redis_url(),
                ..Default::default()
            },
            concurrency: 1,
            ..Default::default()
        },
        shutdown.clone(),
    )
    .await
    .unwrap();
    let running = tokio::spawn(worker.run());
    across_a_relay_kill(&ctx, |from, count| node_produce(&ctx, from, count)).await;
    shutdown.cancel();
    running.await.unwrap().unwrap();
    assert_once_in_key_order(&ctx, 300).await;
    ctx.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rust_produced_events_reach_the_node_inbox_worker_once_in_key_order_across_a_relay_kill() {
    let ctx = Ctx::new("rust_to_npm").await;
    effects_table(&ctx).await;
    let mut consumer = node_cmd(&[
        "test/interop/consume.mjs",
        &ctx.schema,
        &ctx.queue,
        "node-consumer",
    ])
    .stdout(Stdio::piped())
    .stderr(Stdio::inherit())
    .spawn()
    .expect("run node");
    let mut lines = tokio::io::BufReader::new(consumer.stdout.take().unwrap()).lines();
    let first = tokio::time::timeout(WAIT, lines.next_line()).await;
    assert!(
        matches!(&first, Ok(Ok(Some(l))) if l == "ready"),
        "consume.mjs did not start: {first:?}"
    );
    across_a_relay_kill(&ctx, |from, count| {
        let events = (from..from + count)
            .map(|seq| ctx.event(&format!("k{}", seq % KEYS), seq))
            .collect();
        ctx.produce(events)
    })
    .await;
    // A graceful close: SIGTERM, "closed", exit 0.
    sigterm(&consumer);
    let closed = tokio::time::timeout(WAIT, lines.next_line()).await;
    assert!(
        matches!(&closed, Ok(Ok(Some(l))) if l == "closed"),
        "{closed:?}"
    );
    assert!(consumer.wait().await.unwrap().success());
    assert_once_in_key_order(&ctx, 300).await;
    ctx.cleanup().await;
}

/// The package's own tests (`npm test`: node:test against PostgreSQL, Redis and the relay binary).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_npm_package_passes_its_node_test_suite() {
    let mut files: Vec<String> = std::fs::read_dir(package_dir().join("test"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".test.mjs"))
        .map(|n| format!("test/{n}"))
        .collect();
    files.sort();
    assert!(files.len() >= 4, "{files:?}");
    let mut args = vec!["--test", "--test-concurrency=2"];
    args.extend(files.iter().map(String::as_str));
    let out = node_cmd(&args).output().await.expect("run node --test");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "node --test failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("# fail 0"), "{stdout}");
}

/// Rust-produced events through the Kafka sink to the package's kafkajs
/// consumer: killed (SIGKILL) once it applied some, and started again, it
/// gets the messages after its last committed offset again and the inbox
/// skips those it had applied: every effect once, per-key order kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_kafkajs_inbox_consumer_applies_each_event_once_across_its_own_kill() {
    let ctx = Ctx::new("npm_kafka").await;
    effects_table(&ctx).await;
    let broker = postbox_testkit::KafkaBroker::start().await;
    broker.create_topic(&ctx.queue, 2);
    let start_consumer = || {
        node_cmd(&[
            "test/interop/kafka_consume.mjs",
            &ctx.schema,
            &ctx.queue,
            &broker.bootstrap(),
            "node-kafka",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("run node")
    };
    let relay = ctx.relay_with(
        &[
            "--sink",
            "kafka",
            "--kafka-brokers",
            &broker.bootstrap(),
            "--kafka-message-timeout",
            "2s",
        ],
        &[],
    );
    let events = |from: usize, count: usize| -> Vec<postbox::Event> {
        (from..from + count)
            .map(|seq| ctx.event(&format!("k{}", seq % KEYS), seq))
            .collect()
    };
    ctx.produce(events(0, 150)).await;
    let mut consumer = start_consumer();
    wait_until(WAIT, "the first effects", || async {
        effect_count(&ctx).await >= 20
    })
    .await;
    consumer.start_kill().unwrap();
    consumer.wait().await.unwrap();
    ctx.produce(events(150, 150)).await;
    let mut consumer = start_consumer();
    let mut lines = tokio::io::BufReader::new(consumer.stdout.take().unwrap()).lines();
    wait_until(WAIT, "all 300 effects", || async {
        effect_count(&ctx).await >= 300
    })
    .await;
    sigterm(&consumer);
    let mut closed = false;
    while let Ok(Ok(Some(l))) = tokio::time::timeout(WAIT, lines.next_line()).await {
        closed |= l == "closed";
    }
    assert!(closed, "the kafkajs consumer did not close gracefully");
    assert!(consumer.wait().await.unwrap().success());
    drop(relay);
    assert_once_in_key_order(&ctx, 300).await;
    ctx.cleanup().await;
}
