//! `postbox-bench all --quick`: every benchmark runs against the real
//! PostgreSQL, Redis, Kafka broker, RabbitMQ and NATS JetStream and writes
//! its figures and chart. No
//! assertion on time: only that each figure was measured.

use postbox_testkit::KafkaBroker;
use serde_json::Value;

/// The `postbox-bench` binary under test.
const BIN: &str = env!("CARGO_BIN_EXE_postbox-bench");

/// Every throughput row of a section measured something.
fn assert_rows(report: &Value, section: &str, names: &[&str]) {
    let rows = report[section]["rows"]
        .as_array()
        .unwrap_or_else(|| panic!("no {section} rows in {report}"));
    for name in names {
        assert!(
            rows.iter().any(|r| r["name"] == *name),
            "{section}: no row {name:?} in {rows:?}"
        );
    }
    for r in rows {
        let median = r["value"]["median"].as_f64().unwrap_or(f64::NAN);
        assert!(median > 0.0 && median.is_finite(), "{section}: {r}");
        if r["baseline"] == false {
            assert!(r["ratios"][0]["ratio"].as_f64().unwrap() > 0.0, "{r}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bench_all_quick_writes_every_figure_and_the_chart() {
    let broker = KafkaBroker::start().await;
    let nats = postbox_testkit::NatsServer::start("").await;
    let dir = std::env::temp_dir().join(format!("postbox-bench-{}", postbox_testkit::suffix()));
    let (json, png) = (dir.join("bench.json"), dir.join("bench.png"));
    let out = tokio::process::Command::new(BIN)
        .args([
            "all",
            "--quick",
            "--kafka-brokers",
            &broker.bootstrap(),
            "--rabbitmq-url",
            &postbox_testkit::rabbitmq_url(),
            "--nats-url",
            &nats.url(),
        ])
        .args([
            "--json".as_ref(),
            json.as_os_str(),
            "--png".as_ref(),
            png.as_os_str(),
        ])
        .env("DATABASE_URL", postbox_testkit::database_url())
        .env("REDIS_URL", postbox_testkit::redis_url())
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "bench failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("| relay → BullMQ (transaction) |"),
        "{stdout}"
    );

    let report: Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert!(report["cores"].as_u64().unwrap() > 0);
    assert!(report["timestamp"].is_string() && report["params"]["reps"] == 1);
    assert_rows(
        &report,
        "drain",
        &[
            "SQL-only claim+mark",
            "SQL-only claim+delete (sent = delete)",
            "raw BullMQ (transaction), no PostgreSQL",
            "relay → BullMQ (transaction)",
            "raw BullMQ (waves), no PostgreSQL",
            "relay → BullMQ (waves)",
            "relay → BullMQ (transaction, sent = delete)",
            "raw Redis Streams (script), no PostgreSQL",
            "relay → Redis Streams (script)",
            "raw Redis Streams (waves), no PostgreSQL",
            "relay → Redis Streams (waves)",
            "raw webhook, no PostgreSQL",
            "relay → webhook",
            "raw Kafka (transaction), no PostgreSQL",
            "relay → Kafka (transaction)",
            "raw Kafka (waves), no PostgreSQL",
            "relay → Kafka (waves)",
            "raw RabbitMQ, no PostgreSQL",
            "relay → RabbitMQ",
            "raw NATS JetStream, no PostgreSQL",
            "relay → NATS JetStream",
        ],
    );
    // Every relay row is compared with its SQL-only baseline and its raw row
    // (the same sink without PostgreSQL), in that order.
    for r in report["drain"]["rows"].as_array().unwrap() {
        if r["baseline"] == false {
            let to: Vec<&str> = r["ratios"]
                .as_array()
                .unwrap()
                .iter()
                .map(|x| x["to"].as_str().unwrap())
                .collect();
            assert!(
                to.len() == 2 && to[0].starts_with("SQL-only") && to[1].starts_with("raw "),
                "{r}"
            );
        }
    }
    assert!(
        stdout.contains("skipped: relay → SQS FIFO and its raw row: no --sqs-endpoint-url"),
        "{stdout}"
    );
    assert_rows(&report, "producer", &["business insert alone"]);
    assert_rows(&report, "consumer", &["inbox worker, concurrency 32"]);
    let latency = report["latency"]["rows"].as_array().unwrap();
    // Direct add, adaptive and statement NOTIFY, and two polling intervals, at two rates.
    assert_eq!(latency.len(), 10, "{latency:?}");
    for r in latency {
        assert!(r["received"].as_u64().unwrap() > 0, "{r}");
        for p in ["p50_ms", "p95_ms", "p99_ms", "max_ms"] {
            assert!(r[p]["median"].as_f64().unwrap() > 0.0, "{p}: {r}");
        }
    }
    // Two relays left alone and replaced in turn: every message arrives.
    let restart = report["restart"]["rows"].as_array().unwrap();
    assert_eq!(restart.len(), 2, "{restart:?}");
    for r in restart {
        assert_eq!(r["received"], r["sent"], "{r}");
        assert!(r["max_ms"]["median"].as_f64().unwrap() > 0.0, "{r}");
    }
    assert!(
        stdout.contains("relay 2 replaced at"),
        "no replacement line: {stdout}"
    );
    // One relay of two cut off from Redis, or slow to reach it, at each
    // unavailable_after (--quick: 1 s): every message arrives, and the relay
    // with a direct path never stands by.
    let sick = report["sick_relay"]["rows"].as_array().unwrap();
    assert_eq!(sick.len(), 4, "{sick:?}");
    for r in sick {
        assert_eq!(r["received"], r["sent"], "{r}");
        assert_eq!(r["other_standbys"], 0, "{r}");
        assert!(r["p99_ms"]["median"].as_f64().unwrap() > 0.0, "{r}");
    }
    assert!(
        stdout.contains("| 1s | cut for 3s |"),
        "no sick-relay table: {stdout}"
    );
    // On every sink given (all but SQS here): live events with no replay,
    // then during a replay at the default pace; every live event is sent.
    let replay = report["replay"]["rows"].as_array().unwrap();
    assert_eq!(replay.len(), 12, "{replay:?}");
    for r in replay {
        assert_eq!(r["received"], r["sent"], "{r}");
    }
    for sink in [
        "BullMQ",
        "Redis Streams",
        "webhook",
        "Kafka",
        "RabbitMQ",
        "NATS JetStream",
    ] {
        assert!(
            replay
                .iter()
                .any(|r| r["variant"].as_str().unwrap().starts_with(sink)
                    && r["variant"]
                        .as_str()
                        .unwrap()
                        .ends_with("--rate auto (the default)")),
            "{sink}: {replay:?}"
        );
    }
    assert!(
        stdout.contains("skipped: SQS FIFO: no --sqs-endpoint-url"),
        "{stdout}"
    );
    // The drain beside scheduled events, against none; scheduled events never
    // early (the bench fails if one is).
    assert_rows(
        &report,
        "scheduled",
        &[
            "relay → null sink, nothing scheduled",
            "relay → null sink, 10000 scheduled over the next day",
        ],
    );
    let late = report["scheduled_lateness"]["rows"].as_array().unwrap();
    assert_eq!(late.len(), 1, "{late:?}");
    assert!(
        late[0]["max_ms"]["median"].as_f64().unwrap() >= 0.0,
        "{late:?}"
    );
    // The pipeline under load, with 4 and 16 producers: everything produced arrived.
    let load = report["load"]["rows"].as_array().unwrap();
    assert_eq!(load.len(), 2, "{load:?}");
    for r in load {
        for f in [
            "produced_alone_per_s",
            "produced_per_s",
            "delivered_in_window_per_s",
            "p99_ms",
        ] {
            assert!(r[f]["median"].as_f64().unwrap() > 0.0, "{f}: {r}");
        }
    }
    assert!(
        stdout.contains("longest pause in publishing"),
        "no drain timeline: {stdout}"
    );
    let health = report["health"]["rows"].as_array().unwrap();
    assert!(!health.is_empty());
    for r in health {
        assert!(r["produced"].as_u64().unwrap() > 0, "{r}");
        assert!(r["total_bytes"].as_i64().unwrap() > 0, "{r}");
        // Through BullMQ and a consumer: Redis is sampled too.
        assert!(r["redis_used_bytes"].as_u64().unwrap() > 0, "{r}");
        assert!(r["completed_kept"].is_u64(), "{r}");
    }

    let image = std::fs::read(&png).unwrap();
    assert!(
        image.starts_with(b"\x89PNG"),
        "not a PNG: {}",
        png.display()
    );
    assert!(image.len() > 10_000, "a nearly empty chart");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn bench_refuses_parameters_it_cannot_run() {
    for (args, expected) in [
        (
            &["latency", "--rates", "100,0"][..],
            "--rates must be at least 1",
        ),
        (
            &["consumer", "--concurrency", "0"][..],
            "--concurrency must be at least 1",
        ),
        (&["drain", "--reps", "0"][..], "--reps must be at least 1"),
        (
            &["latency", "--duration", "0s"][..],
            "--duration must be longer than 0",
        ),
        (
            &["load", "--load-producers", "4,0"][..],
            "--load-producers must be at least 1",
        ),
        (
            &["load", "--load-duration", "0s"][..],
            "--load-duration must be longer than 0",
        ),
    ] {
        let out = std::process::Command::new(BIN).args(args).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && stderr.contains(expected),
            "{args:?}: {stderr}"
        );
    }
}
