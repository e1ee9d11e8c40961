//! Wire compatibility with the real Node `bullmq` package (pinned in
//! tests/node/package.json): jobs the relay publishes are processed by a Node
//! `Worker`, jobs Node's `queue.add` creates are processed by the Rust inbox
//! worker, and a job id added twice (relay republish, or Node) is one job.
//!
//! Needs `tests/node/node_modules` (`./scripts/test.sh` runs `npm ci` there).

use crate::support::*;
use postbox::Event;
use postbox_bullmq::bullmq::options::RedisConnectionOptions;
use postbox_bullmq::bullmq::WorkerOptions;
use serde_json::{json, Value};
use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

/// Long enough for a loaded CI machine, short enough to fail fast.
const WAIT: Duration = Duration::from_secs(15);

fn node_dir() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/node"))
}

/// Panic, before a test sets anything up, when the Node packages are not installed.
fn require_node_modules() {
    if !node_dir().join("node_modules").join("bullmq").is_dir() {
        panic!(
            "tests/node/node_modules (with bullmq) is missing: run ./scripts/test.sh, \
             which runs `npm ci` in tests/node"
        );
    }
}

/// Run `node tests/node/<script> <args>`, expect exit 0, return its stdout lines.
pub(crate) async fn node(script: &str, args: &[&str]) -> Vec<String> {
    require_node_modules();
    let dir = node_dir();
    let mut cmd = tokio::process::Command::new("node");
    cmd.arg(dir.join(script))
        .args(args)
        .current_dir(&dir)
        .stdin(Stdio::null())
        .kill_on_drop(true);
    let out = tokio::time::timeout(WAIT + Duration::from_secs(5), cmd.output())
        .await
        .unwrap_or_else(|_| panic!("node {script} {args:?} did not exit in time"))
        .unwrap_or_else(|e| panic!("cannot run node (./scripts/test.sh installs it): {e}"));
    let stdout = String::from_utf8(out.stdout).expect("node stdout is UTF-8");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "node {script} {args:?} failed ({}):\n--- stdout\n{stdout}\n--- stderr\n{stderr}",
        out.status
    );
    stdout.lines().map(str::to_owned).collect()
}

/// `produce.mjs`: add `jobs` (`[{name, data, jobId}]`) in order; returns the ids
/// Node's `queue.add` returned and `queue.getJobCounts()` afterwards.
async fn node_produce(queue: &str, jobs: &Value) -> (Vec<String>, Value) {
    let file = std::env::temp_dir().join(format!(
        "postbox-node-{queue}-{}.json",
        postbox_testkit::suffix()
    ));
    std::fs::write(&file, serde_json::to_vec(jobs).unwrap()).unwrap();
    let lines = node(
        "produce.mjs",
        &[&postbox_testkit::redis_url(), queue, file.to_str().unwrap()],
    )
    .await;
    let _ = std::fs::remove_file(&file);
    assert_eq!(
        lines.len(),
        2,
        "produce.mjs prints ids and counts: {lines:?}"
    );
    let ids: Vec<String> = serde_json::from_str(&lines[0]).unwrap();
    let counts: Value = serde_json::from_str(&lines[1]).unwrap();
    (ids, counts)
}

/// Node's `queue.getJobCounts()` for `queue`.
async fn node_counts(queue: &str) -> Value {
    node_produce(queue, &json!([])).await.1
}

/// `consume.mjs`: a Node `Worker` (concurrency 1) processes `count` jobs;
/// returns `{id, name, data}` per job in processing order.
async fn node_consume(queue: &str, count: usize) -> Vec<Value> {
    let timeout_ms = WAIT.as_millis().to_string();
    let lines = node(
        "consume.mjs",
        &[
            &postbox_testkit::redis_url(),
            queue,
            &count.to_string(),
            &timeout_ms,
        ],
    )
    .await;
    lines
        .iter()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn count_of(counts: &Value, state: &str) -> u64 {
    counts[state]
        .as_u64()
        .unwrap_or_else(|| panic!("no {state:?} in getJobCounts(): {counts}"))
}

/// Entries `(event, jobId)` of the queue's BullMQ events stream.
async fn queue_events(queue: &str) -> Vec<(String, String)> {
    let client = redis::Client::open(postbox_testkit::redis_url()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let entries: Vec<(String, Vec<String>)> = redis::cmd("XRANGE")
        .arg(format!("bull:{queue}:events"))
        .arg("-")
        .arg("+")
        .query_async(&mut conn)
        .await
        .unwrap();
    entries
        .into_iter()
        .map(|(_, kv)| {
            let field = |name: &str| {
                kv.chunks(2)
                    .find(|p| p[0] == name)
                    .map(|p| p[1].clone())
                    .unwrap_or_default()
            };
            (field("event"), field("jobId"))
        })
        .collect()
}

/// A payload of each shape the relay must carry unchanged: nesting, unicode,
/// escapes, numbers at the edge of JavaScript's integer range, arrays, nulls.
fn payload(key: &str, seq: usize) -> Value {
    let mut p = match seq % 5 {
        0 => json!({"nested": {"a": {"b": {"c": [1, 2, {"d": "deep"}]}}, "empty": {}, "list": []}}),
        1 => json!({
            "text": "héllo wörld ✓ 日本語 🚀 — \"quoted\" \\ back\nslash\ttab",
            "emoji": "👩‍👩‍👧",
            "ключ": "значение",
        }),
        2 => json!({
            "int": -42,
            "max_safe": 9007199254740991_i64,
            "min_safe": -9007199254740991_i64,
            "float": 3.25,
            "neg_float": -0.5,
            "zero": 0,
            "yes": true,
            "no": false,
            "nothing": null,
        }),
        3 => json!({"array": [1, "two", 3.5, false, null, {"six": [6]}, []], "s": ""}),
        _ => {
            json!({"amount_cents": seq * 1000 + 7, "tags": ["a", "b"], "meta": {"source": "postbox"}})
        }
    };
    p["key"] = json!(key);
    p["seq"] = json!(seq);
    p
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_worker_processes_relayed_jobs() {
    require_node_modules();
    let ctx = Ctx::new("node_a").await;
    const N: usize = 50;
    let keys = ["alice", "bob", "carol", "dave", "ëve-ünïcode"];
    let names = ["order.created", "order.paid", "событие.обновлено"];
    let events: Vec<Event> = (0..N)
        .map(|i| {
            let key = keys[i % keys.len()];
            Event::new(&ctx.queue, names[i % names.len()], payload(key, i)).key(key)
        })
        .collect();
    ctx.produce(events).await;

    let relay = ctx.relay(&postbox_testkit::redis_url(), &[], &[]);
    let c = &ctx;
    wait_until(WAIT, "relay to publish every event", move || async move {
        c.unsent().await == 0
    })
    .await;

    // Node's own view of the queue before consuming.
    let counts = node_counts(&ctx.queue).await;
    assert_eq!(
        count_of(&counts, "waiting"),
        N as u64,
        "Queue.getJobCounts(): {counts}"
    );
    assert_eq!(count_of(&counts, "failed"), 0, "{counts}");

    let consumed = node_consume(&ctx.queue, N).await;
    assert_eq!(consumed.len(), N);

    let rows: Vec<(String, String, Value)> = sqlx::query_as(&format!(
        "SELECT event_id::text, event, payload FROM {}.outbox ORDER BY id",
        ctx.schema
    ))
    .fetch_all(&ctx.pool)
    .await
    .unwrap();
    assert_eq!(rows.len(), N);
    let by_id: HashMap<&str, (&str, &Value)> = rows
        .iter()
        .map(|(id, ev, p)| (id.as_str(), (ev.as_str(), p)))
        .collect();

    let mut seen = Vec::new();
    let mut ids = std::collections::HashSet::new();
    for job in &consumed {
        let id = job["id"]
            .as_str()
            .unwrap_or_else(|| panic!("job id is not a string: {job}"));
        assert!(ids.insert(id), "job {id} processed twice");
        let (event, payload) = by_id
            .get(id)
            .unwrap_or_else(|| panic!("Node processed job {id}, which is no outbox event_id"));
        assert_eq!(job["name"], json!(event), "job {id}: name");
        assert_eq!(&job["data"], *payload, "job {id}: data");
        seen.push((
            id.to_owned(),
            job["data"]["key"].as_str().unwrap().to_owned(),
            job["data"]["seq"].as_u64().unwrap(),
        ));
    }
    assert_per_key_order(&seen);

    let counts = node_counts(&ctx.queue).await;
    assert_eq!(
        count_of(&counts, "completed"),
        N as u64,
        "Queue.getJobCounts(): {counts}"
    );
    assert_eq!(count_of(&counts, "waiting"), 0, "{counts}");
    assert_eq!(count_of(&counts, "active"), 0, "{counts}");
    assert_eq!(count_of(&counts, "failed"), 0, "{counts}");

    drop(relay);
    ctx.cleanup().await;
}

/// A Rust worker on the shared test Redis that polls its queue quickly.
fn worker_options() -> WorkerOptions {
    WorkerOptions {
        connection: RedisConnectionOptions {
            url: postbox_testkit::redis_url(),
            ..Default::default()
        },
        drain_delay: 1,
        ..Default::default()
    }
}

/// Records each job in `<schema>.node_jobs` inside the inbox transaction.
struct Recorder {
    table: String,
}

impl postbox_bullmq::Handler for Recorder {
    async fn handle(
        &self,
        tx: &mut sqlx::PgConnection,
        job: &postbox_bullmq::Message,
    ) -> Result<(), postbox_bullmq::BoxError> {
        sqlx::query(&format!(
            "INSERT INTO {} (job_id, name, data) VALUES ($1, $2, $3)",
            self.table
        ))
        .bind(&job.id)
        .bind(job.event())
        .bind(sqlx::types::Json(job.json::<Value>()?))
        .execute(&mut *tx)
        .await?;
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rust_inbox_worker_processes_node_jobs() {
    require_node_modules();
    let ctx = Ctx::new("node_b").await;
    let table = format!("{}.node_jobs", ctx.schema);
    // No unique constraint: a job processed twice would show as two rows.
    sqlx::raw_sql(&format!(
        "CREATE TABLE {table} (job_id text NOT NULL, name text NOT NULL, data jsonb NOT NULL)"
    ))
    .execute(&ctx.pool)
    .await
    .unwrap();

    // 20 adds, the last one reusing the jobId of the 6th with other data.
    let mut jobs: Vec<Value> = (0..19)
        .map(|i| {
            let key = ["k1", "k2", "ключ"][i % 3];
            json!({"name": format!("node.job.{}", i % 4), "data": payload(key, i), "jobId": format!("node-{i}-{}", postbox_testkit::suffix())})
        })
        .collect();
    let dup_id = jobs[5]["jobId"].as_str().unwrap().to_owned();
    jobs.push(json!({"name": "node.job.dup", "data": {"should": "be ignored"}, "jobId": dup_id}));

    let (ids, counts) = node_produce(&ctx.queue, &Value::Array(jobs.clone())).await;
    let sent: Vec<&str> = jobs.iter().map(|j| j["jobId"].as_str().unwrap()).collect();
    assert_eq!(
        ids, sent,
        "queue.add returns the given jobId, also when it already exists"
    );
    assert_eq!(ids[19], ids[5]);
    assert_eq!(
        count_of(&counts, "waiting"),
        19,
        "the jobId added twice is one job: {counts}"
    );

    let worker = postbox_bullmq::inbox_worker(
        postbox::InboxConsumer::new(
            ctx.pool.clone(),
            postbox::Inbox::new(&ctx.schema).unwrap(),
            "node-interop",
        ),
        &ctx.queue,
        Arc::new(Recorder {
            table: table.clone(),
        }),
        worker_options(),
        tokio_util::sync::CancellationToken::new(),
    )
    .await
    .unwrap();

    let (count_sql, pool) = (&format!("SELECT count(*) FROM {table}"), &ctx.pool);
    wait_until(
        WAIT,
        "the Rust inbox worker to process the 19 Node jobs",
        move || async move {
            sqlx::query_scalar::<_, i64>(count_sql)
                .fetch_one(pool)
                .await
                .unwrap()
                >= 19
        },
    )
    .await;
    worker.worker().close(5000).await.unwrap();

    // Exactly once each, name and data as Node added them (the first add wins).
    let rows: Vec<(String, String, Value, i64)> = sqlx::query_as(&format!(
        "SELECT job_id, min(name), (array_agg(data))[1], count(*) FROM {table} GROUP BY job_id"
    ))
    .fetch_all(&ctx.pool)
    .await
    .unwrap();
    let got: BTreeMap<String, (String, Value, i64)> = rows
        .into_iter()
        .map(|(id, n, d, c)| (id, (n, d, c)))
        .collect();
    let expected: BTreeMap<String, (String, Value, i64)> = jobs[..19]
        .iter()
        .map(|j| {
            (
                j["jobId"].as_str().unwrap().to_owned(),
                (j["name"].as_str().unwrap().to_owned(), j["data"].clone(), 1),
            )
        })
        .collect();
    assert_eq!(got, expected);

    let inbox: Vec<String> = sqlx::query_scalar(&format!(
        "SELECT message_id FROM {}.inbox WHERE consumer = 'node-interop' ORDER BY message_id",
        ctx.schema
    ))
    .fetch_all(&ctx.pool)
    .await
    .unwrap();
    assert_eq!(
        inbox,
        expected.keys().cloned().collect::<Vec<_>>(),
        "one inbox row per job"
    );
    let others: i64 = sqlx::query_scalar(&format!("SELECT count(*) FROM {}.inbox", ctx.schema))
        .fetch_one(&ctx.pool)
        .await
        .unwrap();
    assert_eq!(others, 19);

    // Node sees them completed by the Rust worker.
    let counts = node_counts(&ctx.queue).await;
    assert_eq!(
        count_of(&counts, "completed"),
        19,
        "Queue.getJobCounts(): {counts}"
    );
    assert_eq!(count_of(&counts, "waiting"), 0, "{counts}");
    assert_eq!(count_of(&counts, "active"), 0, "{counts}");
    assert_eq!(count_of(&counts, "failed"), 0, "{counts}");

    ctx.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn duplicate_job_id_exists_once() {
    require_node_modules();
    let ctx = Ctx::new("node_c").await;
    let event_id = uuid::Uuid::new_v4();
    let id = event_id.to_string();
    let data = json!({"order": 7, "note": "published twice, exists once ✓"});
    ctx.produce(vec![Event::new(&ctx.queue, "order.created", data.clone())
        .key("order:7")
        .event_id(event_id)])
        .await;

    // The reset below fires no NOTIFY: poll often so the relay finds it soon.
    let relay = ctx.relay(
        &postbox_testkit::redis_url(),
        &["--poll-interval", "100ms"],
        &[],
    );
    let sent_sql = &format!(
        "SELECT sent_at IS NOT NULL FROM {}.outbox WHERE event_id = $1",
        ctx.schema
    );
    let pool = &ctx.pool;
    let is_sent = move || async move {
        sqlx::query_scalar::<_, bool>(sent_sql)
            .bind(event_id)
            .fetch_one(pool)
            .await
            .unwrap()
    };
    wait_until(WAIT, "relay to publish the event", is_sent).await;

    let view = RedisView::new(&postbox_testkit::redis_url(), &ctx.queue).await;
    assert_eq!(view.waiting_ids().await, vec![id.clone()]);
    let duplicated = |events: &[(String, String)]| {
        events
            .iter()
            .filter(|(e, j)| e == "duplicated" && *j == id)
            .count()
    };
    assert_eq!(duplicated(&queue_events(&ctx.queue).await), 0);

    // A relay that crashed after publishing but before marking the row sent:
    // the row is published again on restart.
    sqlx::query(&format!(
        "UPDATE {}.outbox SET sent_at = NULL, xid = pg_current_xact_id() WHERE event_id = $1",
        ctx.schema
    ))
    .bind(event_id)
    .execute(&ctx.pool)
    .await
    .unwrap();
    wait_until(WAIT, "relay to publish the reset event again", is_sent).await;
    // BullMQ logs the second add of an existing jobId as `duplicated`.
    assert_eq!(
        duplicated(&queue_events(&ctx.queue).await),
        1,
        "the relay re-added the job"
    );
    assert_eq!(
        view.waiting_ids().await,
        vec![id.clone()],
        "one job for the id"
    );
    assert_eq!(view.data(&id).await, data);
    drop(relay);

    // Node's queue.add of the same jobId: the existing job, still one.
    let (ids, counts) = node_produce(
        &ctx.queue,
        &json!([{"name": "order.created", "data": {"from": "node"}, "jobId": id}]),
    )
    .await;
    assert_eq!(ids, vec![id.clone()]);
    assert_eq!(
        count_of(&counts, "waiting"),
        1,
        "Queue.getJobCounts(): {counts}"
    );
    assert_eq!(duplicated(&queue_events(&ctx.queue).await), 2);
    assert_eq!(view.waiting_ids().await, vec![id.clone()]);
    assert_eq!(view.data(&id).await, data, "the first add's data stays");
    assert_eq!(view.name(&id).await, "order.created");

    ctx.cleanup().await;
}

/// Captures what the handler sees of each job's trace context.
struct TraceRecorder {
    seen: std::sync::Mutex<Vec<(String, Option<postbox::TraceContext>, Value)>>,
}

impl postbox_bullmq::Handler for TraceRecorder {
    async fn handle(
        &self,
        _tx: &mut sqlx::PgConnection,
        job: &postbox_bullmq::Message,
    ) -> Result<(), postbox_bullmq::BoxError> {
        self.seen
            .lock()
            .unwrap()
            .push((job.id.clone(), job.trace_context(), job.json::<Value>()?));
        Ok(())
    }
}

/// The row's `traceparent`/`tracestate` reach a Node `Worker` (as `job.data._trace`)
/// and the Rust inbox handler (`trace_context(&job)`); rows without one, and
/// payloads that already use the field, arrive unchanged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trace_context_reaches_node_and_rust_consumers() {
    require_node_modules();
    let ctx = Ctx::new("node_trace").await;
    let tp = |i: usize| format!("00-4bf92f3577b34da6a3ce929d0e0e{i:04x}-00f067aa0ba902b7-01");
    let events = vec![
        Event::new(&ctx.queue, "traced", json!({"n": 0}))
            .key("t")
            .traceparent(tp(0))
            .header("tracestate", "congo=t61rcWkgMzE"),
        Event::new(&ctx.queue, "traced", json!({"n": 1}))
            .key("t")
            .traceparent(tp(1)),
        Event::new(&ctx.queue, "untraced", json!({"n": 2})).key("t"),
        // The payload owns `_trace`: left alone.
        Event::new(&ctx.queue, "own-field", json!({"n": 3, "_trace": "mine"}))
            .key("t")
            .traceparent(tp(3)),
    ];
    ctx.produce(events).await;
    let relay = ctx.relay(&postbox_testkit::redis_url(), &[], &[]);
    let c = &ctx;
    wait_until(WAIT, "relay to publish every event", move || async move {
        c.unsent().await == 0
    })
    .await;
    drop(relay);

    let data: Vec<Value> = node_consume(&ctx.queue, 4)
        .await
        .into_iter()
        .map(|j| j["data"].clone())
        .collect();
    assert_eq!(
        data,
        vec![
            json!({"n": 0, "_trace": {"traceparent": tp(0), "tracestate": "congo=t61rcWkgMzE"}}),
            json!({"n": 1, "_trace": {"traceparent": tp(1)}}),
            json!({"n": 2}),
            json!({"n": 3, "_trace": "mine"}),
        ]
    );

    // The same jobs, re-added under a second queue by Node, seen by the Rust worker.
    let queue2 = format!("{}-rust", ctx.queue);
    let jobs: Vec<Value> = data
        .iter()
        .enumerate()
        .map(|(i, d)| json!({"name": "x", "data": d, "jobId": format!("j{i}")}))
        .collect();
    node_produce(&queue2, &Value::Array(jobs)).await;
    let handler = Arc::new(TraceRecorder {
        seen: Default::default(),
    });
    let worker = postbox_bullmq::inbox_worker(
        postbox::InboxConsumer::new(
            ctx.pool.clone(),
            postbox::Inbox::new(&ctx.schema).unwrap(),
            "trace",
        ),
        &queue2,
        handler.clone(),
        worker_options(),
        tokio_util::sync::CancellationToken::new(),
    )
    .await
    .unwrap();
    let h = &handler;
    wait_until(WAIT, "the Rust worker to see 4 jobs", move || async move {
        h.seen.lock().unwrap().len() >= 4
    })
    .await;
    worker.worker().close(5000).await.unwrap();
    let mut seen = handler.seen.lock().unwrap().clone();
    seen.sort_by(|a, b| a.0.cmp(&b.0));
    let tc0 = seen[0].1.clone().expect("j0 has a trace context");
    assert_eq!(tc0.traceparent, tp(0));
    assert_eq!(tc0.tracestate.as_deref(), Some("congo=t61rcWkgMzE"));
    assert_eq!(
        seen[1].1.as_ref().map(|t| t.traceparent.clone()),
        Some(tp(1))
    );
    assert_eq!(seen[2].1, None);
    assert_eq!(seen[3].1, None);
    // The payload the handler reads: the relay's trace field taken out, a
    // payload's own `_trace` left in.
    let payloads: Vec<Value> = seen.iter().map(|s| s.2.clone()).collect();
    assert_eq!(
        payloads,
        vec![
            json!({"n": 0}),
            json!({"n": 1}),
            json!({"n": 2}),
            json!({"n": 3, "_trace": "mine"})
        ]
    );
    ctx.cleanup().await;
}
