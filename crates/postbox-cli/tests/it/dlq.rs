//! `postbox dlq`: list, show, replay and purge dead letters while a relay runs.

use crate::support::*;
use serde_json::Value;

/// Run `postbox <args>`: (success, stdout, stderr).
pub(crate) async fn cli(args: &[&str]) -> (bool, String, String) {
    let out = tokio::process::Command::new(BIN)
        .args(args)
        .env_remove("DATABASE_URL")
        .output()
        .await
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `postbox dlq <cmd> --database-url .. --schema <schema> <args>`, which must succeed.
async fn dlq(schema: &str, cmd: &str, args: &[&str]) -> String {
    let url = postbox_testkit::database_url();
    let mut all = vec!["dlq", cmd, "--database-url", &url, "--schema", schema];
    all.extend_from_slice(args);
    let (ok, out, err) = cli(&all).await;
    assert!(ok, "postbox {all:?} failed:\n{out}{err}");
    out
}

/// `postbox dlq <cmd> ...`, which must fail; its stderr.
async fn dlq_fails(schema: &str, cmd: &str, args: &[&str]) -> String {
    let url = postbox_testkit::database_url();
    let mut all = vec!["dlq", cmd, "--database-url", &url, "--schema", schema];
    all.extend_from_slice(args);
    let (ok, out, err) = cli(&all).await;
    assert!(!ok, "postbox {all:?} should have failed:\n{out}");
    err
}

/// `dlq list --json` with `args`: the ids listed.
async fn listed(schema: &str, args: &[&str]) -> Vec<i64> {
    let mut a = vec!["--json"];
    a.extend_from_slice(args);
    let v: Value = serde_json::from_str(&dlq(schema, "list", &a).await).unwrap();
    v.as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_i64().unwrap())
        .collect()
}

/// (id, event_id, key) of the dead letters, in id order.
async fn dead(ctx: &Ctx) -> Vec<(i64, String, String)> {
    sqlx::query_as(&format!(
        "SELECT id, event_id::text, key FROM {}.outbox_dead_letter ORDER BY id",
        ctx.schema
    ))
    .fetch_all(&ctx.pool)
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dlq_lists_filters_replays_in_order_and_purges_on_a_live_relay() {
    let ctx = Ctx::new("dlq").await;
    let s = ctx.schema.as_str();
    let redis = postbox_testkit::redis_url();
    let view = RedisView::new(&redis, &ctx.queue).await;
    let relay = ctx.relay(&redis, &["--max-attempts", "1"], &[]);

    // A good event of key a, then poison rows (payloads that are not objects)
    // from a plain-SQL producer: two of key a, one of b, one of c on another topic.
    ctx.produce(vec![ctx.event("a", 0)]).await;
    let other = format!("{}-other", ctx.queue);
    sqlx::query(&format!(
        "INSERT INTO {s}.outbox (topic, event, key, payload) VALUES
            ($1, 'test.event', 'a', '42'),
            ($1, 'test.event', 'b', '\"x\"'),
            ($1, 'test.event', 'a', '[1]'),
            ($2, 'test.event', 'c', '42')"
    ))
    .bind(&ctx.queue)
    .bind(&other)
    .execute(&ctx.pool)
    .await
    .unwrap();
    wait_until(LONG, "four dead letters, nothing unsent", || async {
        ctx.dead_letters().await.len() == 4 && ctx.unsent().await == 0
    })
    .await;
    assert_eq!(
        view.wait_len().await,
        1,
        "only the good event was delivered"
    );
    let dl = dead(&ctx).await;
    let ids: Vec<i64> = dl.iter().map(|d| d.0).collect();
    let of = |k: &str| -> Vec<i64> { dl.iter().filter(|d| d.2 == k).map(|d| d.0).collect() };

    // list: a table, and JSON.
    let table = dlq(s, "list", &[]).await;
    assert!(table.starts_with("ID  "), "{table}");
    assert!(table.contains("BullMQ job data must be"), "{table}");
    for d in &dl {
        assert!(table.contains(&d.1), "{table}");
    }
    assert_eq!(listed(s, &[]).await, ids);
    let v: Value = serde_json::from_str(&dlq(s, "list", &["--json"]).await).unwrap();
    assert_eq!(v[0]["payload"], serde_json::json!(42));
    assert_eq!(v[0]["key"], "a");
    assert_eq!(v[0]["attempts"], 1);

    // Filters, alone and combined.
    assert_eq!(listed(s, &["--key", "a"]).await, of("a"));
    assert_eq!(listed(s, &["--topic", &other]).await, of("c"));
    assert_eq!(
        listed(s, &["--topic", &ctx.queue, "--key", "b"]).await,
        of("b")
    );
    assert_eq!(
        listed(s, &["--error", "bullmq JOB DATA must be a json OBJECT"]).await,
        ids
    );
    assert_eq!(
        listed(s, &["--error", "no such error"]).await,
        Vec::<i64>::new()
    );
    let two = [ids[0].to_string(), ids[3].to_string()];
    assert_eq!(
        listed(s, &["--id", &two[0], "--id", &two[1]]).await,
        vec![ids[0], ids[3]]
    );
    assert_eq!(listed(s, &["--newer-than", "1h"]).await, ids);
    assert_eq!(listed(s, &["--older-than", "1h"]).await, Vec::<i64>::new());
    assert_eq!(listed(s, &["--limit", "2"]).await, ids[..2].to_vec());

    // show: one dead letter in full.
    let shown: Value =
        serde_json::from_str(&dlq(s, "show", &["--id", &ids[2].to_string()]).await).unwrap();
    // The id alone, as earlier releases took it, still works.
    let alone: Value = serde_json::from_str(&dlq(s, "show", &[&ids[2].to_string()]).await).unwrap();
    assert_eq!(shown, alone);
    assert_eq!(shown["event_id"], dl[2].1.as_str());
    assert_eq!(shown["payload"], serde_json::json!([1]));
    assert!(shown["last_error"]
        .as_str()
        .unwrap()
        .contains("attempt 1 of 1"));

    // replay without --yes is a dry run; without a filter it is refused.
    let dry = dlq(s, "replay", &["--key", "a"]).await;
    assert!(dry.contains("dry run") && dry.contains("--yes"), "{dry}");
    let err = dlq_fails(s, "replay", &["--yes"]).await;
    assert!(
        err.contains("no filter given") && err.contains("--all"),
        "{err}"
    );
    assert_eq!(dead(&ctx).await, dl, "nothing changed");

    // The operator fixes the cause, then replays key a into the live relay.
    sqlx::query(&format!(
        "UPDATE {s}.outbox_dead_letter SET payload = jsonb_build_object('key', key, 'seq', id) WHERE key = 'a'"
    ))
    .execute(&ctx.pool)
    .await
    .unwrap();
    let out = dlq(s, "replay", &["--key", "a", "--yes"]).await;
    assert!(out.contains("replayed 2 dead letter(s)"), "{out}");
    wait_until(
        LONG,
        "the replayed events delivered and marked sent",
        || async { view.wait_len().await == 3 && ctx.unsent().await == 0 },
    )
    .await;
    let seen = view.waiting().await;
    assert_per_key_order(&seen);
    let a = of("a");
    assert_eq!(
        seen.iter().map(|j| (j.1.as_str(), j.2)).collect::<Vec<_>>(),
        vec![("a", 0), ("a", a[0] as u64), ("a", a[1] as u64)]
    );
    let a_events: Vec<&str> = dl
        .iter()
        .filter(|d| d.2 == "a")
        .map(|d| d.1.as_str())
        .collect();
    assert_eq!(
        view.waiting_ids().await[1..],
        a_events,
        "jobs keep the original event ids"
    );
    let (attempts, errors, unsent): (i64, i64, i64) = sqlx::query_as(&format!(
        "SELECT sum(attempts), count(last_error), count(*) FILTER (WHERE sent_at IS NULL)
           FROM {s}.outbox WHERE event_id::text = ANY($1)"
    ))
    .bind(&a_events)
    .fetch_one(&ctx.pool)
    .await
    .unwrap();
    assert_eq!((attempts, errors, unsent), (0, 0, 0));
    assert_eq!(listed(s, &[]).await, [of("b"), of("c")].concat());

    // purge: dry run first, then only the matching rows.
    let dry = dlq(s, "purge", &["--topic", &other]).await;
    assert!(dry.contains("would purge 1"), "{dry}");
    assert_eq!(listed(s, &[]).await.len(), 2);
    let out = dlq(s, "purge", &["--topic", &other, "--yes"]).await;
    assert!(out.contains("purged 1 dead letter(s)"), "{out}");
    assert_eq!(listed(s, &[]).await, of("b"));

    // Bad filters say what is wrong.
    let err = dlq_fails(s, "list", &["--older-than", "yesterday"]).await;
    assert!(err.contains("yesterday") && err.contains("1h"), "{err}");
    let err = dlq_fails(s, "purge", &["--older-than", "1h", "--newer-than", "10m"]).await;
    assert!(err.contains("swap"), "{err}");
    let err = dlq_fails(s, "purge", &["--all", "--key", "b", "--yes"]).await;
    assert!(err.contains("--all") && err.contains("--key"), "{err}");
    let err = dlq_fails(s, "show", &["999999"]).await;
    assert!(err.contains("no dead letter with id 999999"), "{err}");
    let err = dlq_fails("t_no_such_schema_dlq", "list", &[]).await;
    assert!(err.contains("postbox migrate"), "{err}");
    let err = dlq_fails("Bad", "list", &[]).await;
    assert!(err.contains("invalid schema name"), "{err}");
    assert_eq!(
        listed(s, &[]).await,
        of("b"),
        "refused commands change nothing"
    );
    // Every act is audited, as the console's are, with who made it.
    assert_eq!(
        audit(&ctx).await,
        [
            ("dead_letters.replay".into(), 2),
            ("dead_letters.purge".into(), 1)
        ]
    );

    drop(relay);
    ctx.cleanup().await;
}

#[tokio::test]
async fn dlq_replay_goes_behind_waiting_rows_of_its_key_and_refuses_conflicts() {
    // No relay: what replay writes stays in the outbox to be looked at.
    let ctx = Ctx::new("dlqord").await;
    let s = ctx.schema.as_str();
    ctx.produce(vec![ctx.event("a", 1)]).await;
    let waiting: i64 = sqlx::query_scalar(&format!("SELECT max(id) FROM {s}.outbox"))
        .fetch_one(&ctx.pool)
        .await
        .unwrap();
    // Dead letters of a with older (smaller) ids than the waiting row, and one
    // of b; stored in reverse id order, so only ORDER BY id gets replay's order right.
    sqlx::query(&format!(
        "INSERT INTO {s}.outbox_dead_letter
                (id, event_id, topic, event, key, payload, headers, created_at, attempts, last_error)
         VALUES (-1, gen_random_uuid(), $1, 'e', 'a', '{{\"n\":3}}', '{{}}', now(), 5, 'boom'),
                (-2, gen_random_uuid(), $1, 'e', 'b', '{{\"n\":2}}', '{{}}', now(), 5, 'boom'),
                (-3, gen_random_uuid(), $1, 'e', 'a', '{{\"n\":1}}', '{{\"h\":\"1\"}}', now() - interval '1 day', 5, 'boom')"
    ))
    .bind(&ctx.queue)
    .execute(&ctx.pool)
    .await
    .unwrap();
    type Row = (String, String, String, String, String);
    let cols = "event_id::text, key, payload::text, headers::text, created_at::text";
    let before: Vec<Row> = sqlx::query_as(&format!(
        "SELECT {cols} FROM {s}.outbox_dead_letter WHERE key = 'a' ORDER BY id"
    ))
    .fetch_all(&ctx.pool)
    .await
    .unwrap();

    dlq(s, "replay", &["--key", "a", "--yes"]).await;
    let after: Vec<Row> = sqlx::query_as(&format!(
        "SELECT {cols} FROM {s}.outbox WHERE id > $1 ORDER BY id"
    ))
    .bind(waiting)
    .fetch_all(&ctx.pool)
    .await
    .unwrap();
    assert_eq!(
        after, before,
        "behind the waiting row, in dead-letter order, everything kept"
    );
    let fresh: i64 = sqlx::query_scalar(&format!(
        "SELECT count(*) FROM {s}.outbox
          WHERE id > $1 AND attempts = 0 AND last_error IS NULL AND next_attempt_at IS NULL"
    ))
    .bind(waiting)
    .fetch_one(&ctx.pool)
    .await
    .unwrap();
    assert_eq!(fresh, 2, "replayed rows start over");
    assert_eq!(listed(s, &[]).await, vec![-2]);

    // The producer enqueued b's event again: replaying it would clash, so nothing moves.
    sqlx::query(&format!(
        "INSERT INTO {s}.outbox (event_id, topic, event, key, payload)
         SELECT event_id, topic, event, key, payload FROM {s}.outbox_dead_letter WHERE id = -2"
    ))
    .execute(&ctx.pool)
    .await
    .unwrap();
    let err = dlq_fails(s, "replay", &["--all", "--yes"]).await;
    assert!(
        err.contains("dead letter(s) -2") && err.contains("nothing was replayed"),
        "{err}"
    );
    assert_eq!(listed(s, &[]).await, vec![-2]);
    ctx.cleanup().await;
}

/// The schema's audit rows, oldest first: (action, count), after checking
/// each names the OS user and the database role of the CLI that made it.
pub(crate) async fn audit(ctx: &Ctx) -> Vec<(String, i32)> {
    let rows: Vec<(String, String, i32)> = sqlx::query_as(&format!(
        "SELECT actor, action, count FROM {}.console_audit ORDER BY id",
        ctx.schema
    ))
    .fetch_all(&ctx.pool)
    .await
    .unwrap();
    let role: String = sqlx::query_scalar("SELECT current_user::text")
        .fetch_one(&ctx.pool)
        .await
        .unwrap();
    for (actor, ..) in &rows {
        assert!(
            actor.ends_with(&format!("(postbox cli, database role {role})")),
            "{actor}"
        );
    }
    rows.into_iter().map(|(_, a, n)| (a, n)).collect()
}
