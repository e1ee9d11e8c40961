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

mod job_ids;
mod node_worker;
mod rust_worker;
mod trace;

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
