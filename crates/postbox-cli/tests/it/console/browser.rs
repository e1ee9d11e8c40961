//! The console in a real browser (headless Chromium, driven by the pinned
//! `playwright-core` in tests/node, tests/node/console.mjs), against a relay
//! and RabbitMQ: sign in; see lag rise while the only relay cannot publish
//! (a health record and locks written by hand) and fall when a relay that
//! can runs; find the dead-letter group of events whose exchange
//! did not exist, declare it, replay the group, see the events delivered and
//! the audit row written; a viewer has no replay or purge button.
//! Screenshots of every page go to `target/test-artifacts/console/` (the
//! docs' operations/console.md shows them).

use super::*;
use crate::status::{fake, FakeRelay};
use postbox_rabbitmq::lapin::options::{
    ExchangeDeclareOptions, ExchangeDeleteOptions, QueueBindOptions, QueueDeclareOptions,
    QueueDeleteOptions,
};
use postbox_rabbitmq::lapin::types::FieldTable;
use postbox_rabbitmq::lapin::{Channel, Connection, ConnectionProperties, ExchangeKind};
use sqlx::Connection as _;
use std::path::PathBuf;
use std::time::Duration;

fn workspace() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
}

/// Chromium and playwright-core, which ./scripts/test.sh installs.
fn require_browser() {
    assert!(
        std::path::Path::new("/usr/bin/chromium").exists(),
        "/usr/bin/chromium is missing: run ./scripts/test.sh, which installs Debian's chromium"
    );
    assert!(
        workspace().join("tests/node/node_modules/playwright-core").is_dir(),
        "tests/node/node_modules is missing: run ./scripts/test.sh, which runs `npm ci` in tests/node"
    );
}

/// Run one step of console.mjs: its JSON summary.
async fn step(name: &str, console: &ConsoleProcess, schema: &str, token: &str) -> Value {
    let artifacts = workspace().join("target/test-artifacts/console");
    let run = tokio::process::Command::new("node")
        .arg(workspace().join("tests/node/console.mjs"))
        .args([name, &console.base, schema, token])
        .arg(&artifacts)
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(Duration::from_secs(90), run)
        .await
        .expect("console.mjs finishes within 90 s")
        .expect("run node (./scripts/test.sh installs it)");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "console.mjs {name} exited with {}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
        .lines()
        .rev()
        .find_map(|l| serde_json::from_str(l).ok())
        .unwrap_or_else(|| panic!("no JSON summary from console.mjs {name}:\n{stdout}"))
}

async fn channel() -> (Connection, Channel) {
    let conn = Connection::connect(
        &postbox_testkit::rabbitmq_url(),
        ConnectionProperties::default(),
    )
    .await
    .expect("RabbitMQ runs (./scripts/test.sh starts it)");
    let ch = conn.create_channel().await.unwrap();
    (conn, ch)
}

/// A durable topic exchange and a queue of the same name bound to every key.
async fn declare(ch: &Channel, name: &str) {
    let durable = ExchangeDeclareOptions {
        durable: true,
        ..Default::default()
    };
    ch.exchange_declare(
        name.into(),
        ExchangeKind::Topic,
        durable,
        FieldTable::default(),
    )
    .await
    .unwrap();
    let q = QueueDeclareOptions {
        durable: true,
        ..Default::default()
    };
    ch.queue_declare(name.into(), q, FieldTable::default())
        .await
        .unwrap();
    ch.queue_bind(
        name.into(),
        name.into(),
        "#".into(),
        QueueBindOptions::default(),
        FieldTable::default(),
    )
    .await
    .unwrap();
}

async fn queued(ch: &Channel, name: &str) -> u32 {
    let passive = QueueDeclareOptions {
        passive: true,
        durable: true,
        ..Default::default()
    };
    ch.queue_declare(name.into(), passive, FieldTable::default())
        .await
        .unwrap()
        .message_count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_sees_lag_and_replays_a_fixed_group_in_a_browser() {
    require_browser();
    let ctx = Ctx::new("con_web").await;
    let (good, bad) = (
        format!("{}-good", ctx.schema),
        format!("{}-bad", ctx.schema),
    );
    let (_conn, ch) = channel().await;
    declare(&ch, &good).await;
    let relay = || {
        let url = postbox_testkit::rabbitmq_url();
        let args = [
            "--sink",
            "rabbitmq",
            "--rabbitmq-url",
            &url,
            "--max-attempts",
            "1",
        ];
        ctx.relay_with(&args, &[])
    };

    // Three events to an exchange nobody declared: dead-lettered at once.
    let mut r = relay();
    ctx.produce((1..=3).map(|i| event(&bad, &format!("b{i}"), i)).collect())
        .await;
    wait_until(LONG, "three dead letters", || async {
        ctx.dead_letters().await.len() == 3
    })
    .await;
    // Stopped cleanly: its sessions end and it removes its health record
    // (a killed relay's would show as stale on the overview).
    r.signal("TERM");
    assert_eq!(r.wait(LONG).await, Some(0), "{}", r.output());

    // The relay stopped: events wait and grow old.
    ctx.produce(
        (1..=20)
            .map(|i| event(&good, &format!("k{}", i % 4), i))
            .collect(),
    )
    .await;
    // A relay that cannot reach RabbitMQ holds every partition (its health
    // record and its locks, written by hand): the events wait on it, and
    // the overview says so.
    let stuck = "postbox-relay:31337:9f3c2a";
    let held = FakeRelay {
        sink: "rabbitmq",
        error: Some("IO error: Connection refused (os error 111)"),
        partitions: 0..64,
        ..fake(stuck, "relay-7d9f5c-x2kq")
    }
    .write(&ctx.schema)
    .await;
    let console = ConsoleProcess::start(&ctx.schema, &[]).await;
    let lag = step("lag", &console, &ctx.schema, ADMIN).await;
    assert_eq!(lag["pending"], 20, "{lag}");
    let relays = lag["relays"].as_str().unwrap();
    assert!(
        relays.contains("64 of 64 partitions owned") && relays.contains("1 cannot publish"),
        "{lag}"
    );
    held.unwrap().close().await.unwrap();
    sqlx::query(&format!(
        "DELETE FROM {}.outbox_relays WHERE instance = $1",
        ctx.schema
    ))
    .bind(stuck)
    .execute(&ctx.pool)
    .await
    .unwrap();

    // It runs again: nothing waits.
    let r = relay();
    let drained = step("drained", &console, &ctx.schema, ADMIN).await;
    assert_eq!(drained["pending"], 0, "{drained}");
    assert!(drained["delivered"].as_i64().unwrap() >= 20, "{drained}");
    assert!(
        drained["relays"]
            .as_str()
            .unwrap()
            .contains("64 of 64 partitions owned"),
        "{drained}"
    );
    assert_eq!(queued(&ch, &good).await, 20);

    // Fix the cause, then replay the group from the browser.
    declare(&ch, &bad).await;
    let replayed = step("replay", &console, &ctx.schema, ADMIN).await;
    assert_eq!(replayed["group_count"], 3, "{replayed}");
    assert_eq!(replayed["confirm_count"], 3, "{replayed}");
    assert_eq!(replayed["replayed"], 3, "{replayed}");
    let audit: Vec<String> = serde_json::from_value(replayed["audit"].clone()).unwrap();
    assert_eq!(
        audit[1..4],
        ["alice", "dead_letters.replay", "3"],
        "{audit:?}"
    );
    wait_until(LONG, "the replayed events delivered", || async {
        ctx.unsent().await == 0 && ctx.dead_letters().await.is_empty()
    })
    .await;
    wait_until(LONG, "the replayed events in their queue", || async {
        queued(&ch, &bad).await == 3
    })
    .await;

    // A viewer sees the groups and cannot act.
    ctx.produce(vec![event(&format!("{}-none", ctx.schema), "x", 1)])
        .await;
    wait_until(LONG, "another dead letter", || async {
        ctx.dead_letters().await.len() == 1
    })
    .await;
    let viewer = step("viewer", &console, &ctx.schema, VIEWER).await;
    assert_eq!(viewer["buttons"], 0, "{viewer}");

    drop(r);
    for name in [&good, &bad] {
        let _ = ch
            .queue_delete(name.as_str().into(), QueueDeleteOptions::default())
            .await;
        let _ = ch
            .exchange_delete(name.as_str().into(), ExchangeDeleteOptions::default())
            .await;
    }
    ctx.cleanup().await;
}

/// Markup and very long text in every field the console shows — a topic,
/// a key, an error, a payload, a header, a consumer name, a relay's host and
/// its sink's error — stays text in the browser: no script runs, no element
/// is made of it. And no page of the console can be put in a frame.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_content_is_inert_and_the_console_cannot_be_framed() {
    require_browser();
    let ctx = Ctx::new("con_evil").await;
    let s = ctx.schema.as_str();
    let evil = r#"<img src=x onerror="window.__pwned=1" data-evil><script data-evil>window.__pwned=1</script>"#;
    let long = "A".repeat(5000);
    let text = format!("{evil} {long}");
    // A pending event (no relay runs: it waits on the overview), a relay
    // dead letter, a consumer's.
    sqlx::query(&format!(
        "INSERT INTO {s}.outbox (topic, event, key, payload, headers) VALUES ($1, $1, $1, $2, $3)"
    ))
    .bind(&text)
    .bind(serde_json::json!({ "note": text }))
    .bind(serde_json::json!({ "x-evil": evil }))
    .execute(&ctx.pool)
    .await
    .unwrap();
    sqlx::query(&format!(
        "INSERT INTO {s}.outbox_dead_letter
                (id, event_id, topic, event, key, payload, headers, created_at, attempts, last_error)
         VALUES (1, gen_random_uuid(), $1, $1, $1, $2, $3, now(), 3, $1)"
    ))
    .bind(&text)
    .bind(serde_json::json!({ "note": text }))
    .bind(serde_json::json!({ "x-evil": evil }))
    .execute(&ctx.pool)
    .await
    .unwrap();
    sqlx::query(&format!(
        "INSERT INTO {s}.inbox_dead_letter
                (consumer, message_id, topic, payload, headers, source, attempts, last_error)
         VALUES ($1, $1, $1, convert_to($1, 'UTF8'), '[]', $1, 3, $1)"
    ))
    .bind(&text)
    .execute(&ctx.pool)
    .await
    .unwrap();
    let relay = FakeRelay {
        error: Some(&text),
        ..fake("postbox-relay:4242:e1e1e1", evil)
    }
    .write(s)
    .await;
    let console = ConsoleProcess::start(s, &[]).await;
    let seen = step("hostile", &console, s, ADMIN).await;
    assert_eq!(seen["pwned"], false, "{seen}");
    assert_eq!(seen["evil_elements"], 0, "{seen}");
    // Shown, as text, on every page visited.
    assert!(seen["pages"].as_u64().unwrap() >= 4, "{seen}");
    assert_eq!(seen["shown_as_text"], seen["pages"], "{seen}");
    assert_eq!(seen["framed"], false, "{seen}");
    drop((relay, console));
    ctx.cleanup().await;
}
