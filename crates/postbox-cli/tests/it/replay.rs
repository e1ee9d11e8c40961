//! `postbox replay` as a command: the dry run, the selection, the pace, an
//! interruption and its resumption, and bad input. What a replay delivers,
//! sink by sink, is in the conformance suite (conformance/replay.rs).

use crate::support::*;
use std::process::Output;
use std::time::Instant;
use tokio::io::AsyncBufReadExt;

/// `n` sent rows of `topic` over five keys, as a relay with `sent = "mark"`
/// leaves them.
async fn sent_rows(ctx: &Ctx, topic: &str, n: i64) {
    sqlx::query(&format!(
        "INSERT INTO {}.outbox (topic, event, key, payload, sent_at)
         SELECT $1, 'test.event', 'k' || (i % 5), jsonb_build_object('seq', i), now()
           FROM generate_series(1, $2) i",
        ctx.schema
    ))
    .bind(topic)
    .bind(n)
    .execute(&ctx.pool)
    .await
    .unwrap();
}

fn replay(ctx: &Ctx) -> tokio::process::Command {
    let mut cmd = tokio::process::Command::new(BIN);
    cmd.args(["replay", "--schema", &ctx.schema])
        .env("DATABASE_URL", postbox_testkit::database_url())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    cmd
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

async fn run(ctx: &Ctx, args: &[&str]) -> (bool, String) {
    let out = replay(ctx).args(args).output().await.unwrap();
    (out.status.success(), text(&out))
}

#[tokio::test]
async fn a_dry_run_counts_per_topic_and_changes_nothing_then_the_selection_is_replayed() {
    let ctx = Ctx::new("replay_dry").await;
    sent_rows(&ctx, "orders", 30).await;
    sent_rows(&ctx, "payments", 20).await;
    let (ok, out) = run(&ctx, &["--since", "1h"]).await;
    assert!(ok, "{out}");
    assert!(out.contains("would replay 50 retained event(s)"), "{out}");
    assert!(
        out.lines()
            .any(|l| l.starts_with("orders ") && l.contains(" 30 ")),
        "{out}"
    );
    assert!(
        out.lines()
            .any(|l| l.starts_with("payments ") && l.contains(" 20 ")),
        "{out}"
    );
    assert!(out.contains("dry run: nothing changed"), "{out}");
    assert_eq!(ctx.unsent().await, 0, "a dry run changes nothing");

    // One topic and one key of it: 30 orders over five keys, six of k2.
    let (ok, out) = run(
        &ctx,
        &[
            "--since", "1h", "--topic", "orders", "--key", "k2", "--rate", "0", "--yes",
        ],
    )
    .await;
    assert!(ok, "{out}");
    assert!(out.contains("replayed 6 event(s)"), "{out}");
    let replayed: Vec<(String, Option<String>, i32, Option<String>)> = sqlx::query_as(&format!(
        "SELECT topic::text, key, attempts, last_error FROM {}.outbox WHERE sent_at IS NULL",
        ctx.schema
    ))
    .fetch_all(&ctx.pool)
    .await
    .unwrap();
    assert_eq!(replayed.len(), 6);
    assert!(replayed
        .iter()
        .all(|r| r.0 == "orders" && r.1.as_deref() == Some("k2") && r.2 == 0 && r.3.is_none()));
    ctx.cleanup().await;
}

/// `--rate` holds: 250 events at 100 a second take at least 2 s (chunks of at
/// most a tenth of a second's worth, each started on time, never ahead), and
/// the progress lines say so (they once counted a chunk before its wait, and
/// showed 1,427 events/s under `--rate 1000`).
#[tokio::test]
async fn the_rate_is_a_ceiling() {
    let ctx = Ctx::new("replay_rate").await;
    sent_rows(&ctx, "orders", 250).await;
    let start = Instant::now();
    let (ok, out) = run(&ctx, &["--since", "1h", "--rate", "100", "--yes"]).await;
    assert!(ok, "{out}");
    assert!(
        start.elapsed() >= std::time::Duration::from_secs(2),
        "{out}"
    );
    let rates: Vec<f64> = out
        .lines()
        .filter_map(|l| {
            l.split(" at ")
                .nth(1)?
                .split(" events/s")
                .next()?
                .parse()
                .ok()
        })
        .collect();
    assert!(!rates.is_empty(), "no progress line: {out}");
    assert!(rates.iter().all(|r| *r <= 105.0), "{rates:?}: {out}");
    assert_eq!(ctx.unsent().await, 250);
    ctx.cleanup().await;
}

/// By default a replay follows the relay: with no relay running it makes one
/// chunk unsent (20 events, the first size), waits for it, says so after a while and goes on in smaller
/// chunks (a fixed rate made all 2,000 unsent within two seconds); once a
/// relay runs, it finishes and the relay sends every event.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_default_replay_follows_the_relay() {
    let ctx = Ctx::new("replay_follow").await;
    sent_rows(&ctx, &ctx.queue, 2000).await;
    let mut child = replay(&ctx)
        .args(["--since", "1h", "--chunk", "200", "--yes"])
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = tokio::io::BufReader::new(child.stderr.take().unwrap()).lines();
    let notice = loop {
        let line = tokio::time::timeout(LONG, lines.next_line())
            .await
            .expect("a notice that the relay does not send")
            .unwrap()
            .expect("the replay's stderr ended before its notice");
        if line.contains("has not sent") {
            break line;
        }
    };
    assert!(
        notice.contains("last 20 event(s)") && notice.contains("is a relay running"),
        "{notice}"
    );
    let waiting = ctx.unsent().await;
    assert!(
        (20..=30).contains(&waiting),
        "one chunk at a time: {waiting} unsent"
    );

    let relay = ctx.relay(&postbox_testkit::redis_url(), &[], &[]);
    let rest = tokio::spawn(async move {
        let mut out = String::new();
        while let Ok(Some(l)) = lines.next_line().await {
            out.push_str(&l);
            out.push('\n');
        }
        out
    });
    let status = tokio::time::timeout(LONG, child.wait())
        .await
        .expect("the replay ends once a relay sends")
        .unwrap();
    let err = rest.await.unwrap();
    assert!(status.success(), "{err}");
    wait_until(LONG, "every replayed event sent", || async {
        ctx.unsent().await == 0
    })
    .await;
    drop(relay);
    ctx.cleanup().await;
}

/// SIGINT stops a replay after the chunk in flight; it prints the command
/// that resumes it, which replays the rest and nothing it did already (here
/// the rows the first part replayed are marked sent again, as a relay would,
/// before resuming: the resumed replay leaves them alone).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interrupted_replay_resumes_where_it_stopped() {
    let ctx = Ctx::new("replay_resume").await;
    sent_rows(&ctx, "orders", 500).await;
    let child = replay(&ctx)
        .args(["--since", "1h", "--rate", "50", "--yes"])
        .spawn()
        .unwrap();
    wait_until(LONG, "part of the replay done", || async {
        ctx.unsent().await >= 50
    })
    .await;
    let pid = child.id().unwrap().to_string();
    let kill = std::process::Command::new("kill")
        .args(["-INT", &pid])
        .status()
        .unwrap();
    assert!(kill.success());
    let out = child.wait_with_output().await.unwrap();
    let shown = text(&out);
    assert!(
        !out.status.success(),
        "an interrupted replay fails: {shown}"
    );
    let first = ctx.unsent().await;
    assert!((50..500).contains(&first), "{first}: {shown}");
    assert!(
        shown.contains(&format!("interrupted after {first} of 500 events")),
        "{shown}"
    );
    let resume = shown
        .lines()
        .find_map(|l| l.trim().strip_prefix("postbox replay "))
        .unwrap_or_else(|| panic!("a resume command: {shown}"))
        .replace("--rate 50", "--rate 0");
    sqlx::query(&format!(
        "UPDATE {}.outbox SET sent_at = now() WHERE sent_at IS NULL",
        ctx.schema
    ))
    .execute(&ctx.pool)
    .await
    .unwrap();
    let out = tokio::process::Command::new(BIN)
        .args(["replay"])
        .args(resume.split_whitespace())
        .env("DATABASE_URL", postbox_testkit::database_url())
        .output()
        .await
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        text(&out).contains(&format!("replayed {} event(s)", 500 - first)),
        "{}",
        text(&out)
    );
    assert_eq!(ctx.unsent().await, 500 - first, "the rest, once");
    ctx.cleanup().await;
}

#[tokio::test]
async fn bad_input_is_refused_and_changes_nothing() {
    let ctx = Ctx::new("replay_bad").await;
    // Nothing retained: the error says how far back the schema reaches.
    let (ok, out) = run(&ctx, &["--since", "1h", "--yes"]).await;
    assert!(
        !ok && out.contains("no sent events are retained at all"),
        "{out}"
    );
    assert!(out.contains("outbox_retention"), "{out}");
    sent_rows(&ctx, "orders", 10).await;
    for (args, says) in [
        (
            &["--since", "1h", "--until", "2h"][..],
            "did you swap them?",
        ),
        (
            &["--since", "1h", "--until", "2999-01-01T00:00:00Z"],
            "after the database's now",
        ),
        (&["--since", "yesterday"], "nor a duration ago"),
        (
            &["--since", "1h", "--topic", "nope", "--yes"],
            "of topic(s) nope",
        ),
        (&["--since", "1h", "--key", ""], "--key must not be empty"),
        (&["--since", "1h", "--chunk", "0"], "--chunk"),
        (&["--since", "1h", "--rate=-1"], "--rate"),
    ] {
        let (ok, out) = run(&ctx, args).await;
        assert!(!ok && out.contains(says), "{args:?}: {out}");
    }
    let out = tokio::process::Command::new(BIN)
        .args(["replay", "--schema", "a,b", "--since", "1h"])
        .env("DATABASE_URL", postbox_testkit::database_url())
        .output()
        .await
        .unwrap();
    assert!(
        text(&out).contains("one schema at a time"),
        "{}",
        text(&out)
    );
    assert_eq!(ctx.unsent().await, 0);
    ctx.cleanup().await;
}

/// A replay needs what the relay already has: `grant --as relay` is enough.
#[tokio::test]
async fn a_replay_runs_as_the_relays_role() {
    let ctx = Ctx::new("replay_role").await;
    sent_rows(&ctx, "orders", 20).await;
    let (role, as_role) = ctx.granted_role("relay").await;
    let out = replay(&ctx)
        .args(["--since", "1h", "--rate", "0", "--yes"])
        .env("DATABASE_URL", &as_role)
        .output()
        .await
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(ctx.unsent().await, 20);
    ctx.cleanup().await;
    drop_role(&role).await;
}
