//! `postbox status`: backlog per topic and partition ownership per relay instance.

use crate::dlq::cli;
use crate::support::*;
use serde_json::Value;

/// `postbox status --json` for `schemas`.
async fn status_json(schemas: &[&str]) -> Value {
    let url = postbox_testkit::database_url();
    let mut args = vec!["status", "--database-url", &url, "--json"];
    for s in schemas {
        args.extend(["--schema", s]);
    }
    let (ok, out, err) = cli(&args).await;
    assert!(ok, "postbox {args:?} failed:\n{out}{err}");
    serde_json::from_str(&out).unwrap()
}

/// Whether the relays of `st` are exactly the processes `pids`, owning all
/// partitions between them, each some, none twice.
fn split_between(st: &Value, pids: &[u32]) -> bool {
    let relays = st["relays"].as_array().unwrap();
    let mut procs: Vec<u64> = relays
        .iter()
        .filter_map(|r| r["process_id"].as_u64())
        .collect();
    procs.sort_unstable();
    let mut want: Vec<u64> = pids.iter().map(|&p| u64::from(p)).collect();
    want.sort_unstable();
    let mut all: Vec<i64> = relays
        .iter()
        .flat_map(|r| r["partitions"].as_array().unwrap())
        .map(|p| p.as_i64().unwrap())
        .collect();
    all.sort_unstable();
    procs == want
        && relays
            .iter()
            .all(|r| !r["partitions"].as_array().unwrap().is_empty())
        && all == (0..64).collect::<Vec<i64>>()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_shows_two_relays_sharing_the_partitions() {
    let ctx = Ctx::new("stlive").await;
    let redis = postbox_testkit::redis_url();
    let r1 = ctx.relay(&redis, &[], &[]);
    let r2 = ctx.relay(&redis, &["--workers", "2"], &[]);
    let pids = [r1.pid(), r2.pid()];
    wait_until(LONG, "two relays owning all 64 partitions", || async {
        split_between(&status_json(&[&ctx.schema]).await[0], &pids)
    })
    .await;
    let st = &status_json(&[&ctx.schema]).await[0];
    assert_eq!(st["partitions_owned"], 64);
    assert_eq!(st["partitions_unowned"], "");
    for r in st["relays"].as_array().unwrap() {
        let name = r["instance"].as_str().unwrap();
        let pid = r["process_id"].as_u64().unwrap();
        assert!(name.starts_with(&format!("postbox-relay:{pid}:")), "{r}");
        let sessions = if pid == u64::from(r2.pid()) { 2 } else { 4 };
        assert_eq!(r["sessions"], sessions, "{r}");
        assert_eq!(r["backend_pids"].as_array().unwrap().len(), sessions);
        assert!(r["session_start"].is_string(), "{r}");
        assert!(r["last_active"].is_string(), "{r}");
        assert_eq!(r["version"], env!("CARGO_PKG_VERSION"), "{r}");
        assert!(!r["partition_ranges"].as_str().unwrap().is_empty(), "{r}");
    }

    let url = postbox_testkit::database_url();
    let (ok, out, err) = cli(&["status", "--database-url", &url, "--schema", &ctx.schema]).await;
    assert!(ok, "{err}");
    assert!(
        out.contains(&format!("postbox-relay:{}:", r1.pid()))
            && out.contains(&format!("postbox-relay:{}:", r2.pid()))
            && out.contains("64 of 64 partitions owned"),
        "{out}"
    );
    drop((r1, r2));
    ctx.cleanup().await;
}

#[tokio::test]
async fn status_counts_pending_retrying_and_dead_letters_per_topic() {
    // No relay on this schema: what is inserted stays put.
    let ctx = Ctx::new("stidle").await;
    let s = ctx.schema.as_str();
    sqlx::query(&format!(
        "INSERT INTO {s}.outbox (topic, event, key, payload, created_at, attempts, next_attempt_at, sent_at) VALUES
            ('t1', 'e', 'a', '{{}}', now() - interval '90 seconds', 0, NULL, NULL),
            ('t1', 'e', 'b', '{{}}', now() - interval '30 seconds', 0, NULL, NULL),
            ('t1', 'e', 'a', '{{}}', now(), 0, NULL, NULL),
            ('t1', 'e', 'c', '{{}}', now() - interval '1 hour', 0, NULL, now()),
            ('t2', 'e', 'd', '{{}}', now() - interval '5 seconds', 2, now() + interval '1 hour', NULL)"
    ))
    .execute(&ctx.pool)
    .await
    .unwrap();
    sqlx::query(&format!(
        "INSERT INTO {s}.outbox_dead_letter
                (id, event_id, topic, event, key, payload, headers, created_at, attempts, last_error)
         VALUES (1000, gen_random_uuid(), 't1', 'e', 'x', '1', '{{}}', now(), 3, 'boom'),
                (1001, gen_random_uuid(), 't3', 'e', 'x', '1', '{{}}', now(), 3, 'boom')"
    ))
    .execute(&ctx.pool)
    .await
    .unwrap();
    // The consumers' dead letters count too, per consumer.
    sqlx::query(&format!(
        "INSERT INTO {s}.inbox_dead_letter
                (consumer, message_id, topic, payload, headers, source, attempts, last_error, replay_at)
         VALUES ('shipping', 'm1', 't1', '\\x', '[]', 'q', 3, 'boom', NULL),
                ('shipping', 'm2', 't1', '\\x', '[]', 'q', 3, 'boom', now()),
                ('billing', 'm1', 't1', '\\x', '[]', 'q', 3, 'boom', NULL)"
    ))
    .execute(&ctx.pool)
    .await
    .unwrap();

    let st = &status_json(&[s]).await[0];
    assert_eq!(st["schema"], s);
    assert_eq!(st["read_path"], "position");
    assert_eq!(st["wake_up"], "adaptive");
    assert_eq!(st["consumer_dead_letters"], 3);
    assert_eq!(
        st["consumers"],
        serde_json::json!([
            {"consumer": "billing", "dead_letters": 1, "replay_waiting": 0},
            {"consumer": "shipping", "dead_letters": 2, "replay_waiting": 1}
        ])
    );
    assert_eq!(
        (&st["pending"], &st["retrying"], &st["dead_letters"]),
        (&4.into(), &1.into(), &2.into())
    );
    let topics = st["topics"].as_array().unwrap();
    let names: Vec<&str> = topics
        .iter()
        .map(|t| t["topic"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["t1", "t2", "t3"]);
    let age = |t: &Value| t["oldest_pending_age_seconds"].as_f64().unwrap();
    assert_eq!(
        (
            &topics[0]["pending"],
            &topics[0]["retrying"],
            &topics[0]["dead_letters"]
        ),
        (&3.into(), &0.into(), &1.into())
    );
    assert!((90.0..120.0).contains(&age(&topics[0])), "{}", topics[0]);
    assert_eq!(
        (
            &topics[1]["pending"],
            &topics[1]["retrying"],
            &topics[1]["dead_letters"]
        ),
        (&1.into(), &1.into(), &0.into())
    );
    assert!((5.0..35.0).contains(&age(&topics[1])), "{}", topics[1]);
    assert_eq!(topics[2]["pending"], 0);
    assert!(topics[2]["oldest_pending_age_seconds"].is_null());
    assert!((90.0..120.0).contains(&st["oldest_pending_age_seconds"].as_f64().unwrap()));
    assert_eq!(st["relays"], serde_json::json!([]));
    assert_eq!(st["partitions_unowned"], "0-63");

    // Several schemas at once, in the order given; tables by default.
    let other = Ctx::new("stidle2").await;
    let both = status_json(&[s, &other.schema]).await;
    assert_eq!(both.as_array().unwrap().len(), 2);
    assert_eq!(both[1]["schema"], other.schema.as_str());
    assert_eq!(both[1]["pending"], 0);
    let url = postbox_testkit::database_url();
    let (ok, out, err) = cli(&["status", "--database-url", &url, "--schema", s]).await;
    assert!(ok, "{err}");
    assert!(
        out.contains(&format!("schema {s}: 4 pending (oldest 1m3"))
            && out.contains("2 dead letter(s), 3 consumer dead letter(s)")
            && out.contains("wake-up: adaptive")
            && out.contains("relays: none"),
        "{out}"
    );

    // An unknown schema says what to do.
    let (ok, _, err) = cli(&[
        "status",
        "--database-url",
        &url,
        "--schema",
        s,
        "--schema",
        "t_no_such_schema_st",
    ])
    .await;
    assert!(!ok);
    assert!(
        err.contains("t_no_such_schema_st") && err.contains("postbox migrate"),
        "{err}"
    );
    other.cleanup().await;
    ctx.cleanup().await;
}

/// A schema one migration behind (mid-upgrade) is still reported, with the
/// read path its old relays use and the command that moves it on.
#[tokio::test]
async fn status_names_the_read_path_of_a_schema_before_0010() {
    let ctx = Ctx::new("stpath").await;
    sqlx::query(&format!(
        "DELETE FROM {}.postbox_migrations WHERE version >= 10",
        ctx.schema
    ))
    .execute(&ctx.pool)
    .await
    .unwrap();
    assert_eq!(status_json(&[&ctx.schema]).await[0]["read_path"], "head");
    let url = postbox_testkit::database_url();
    let (ok, out, err) = cli(&["status", "--database-url", &url, "--schema", &ctx.schema]).await;
    assert!(ok, "{err}");
    assert!(out.contains("run `postbox migrate` (0010)"), "{out}");
    ctx.cleanup().await;
}
