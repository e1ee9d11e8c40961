//! The producer joins the caller's transaction: rollback leaves nothing, commit one row per event.

use crate::support::*;
use futures::FutureExt;
use postbox::Event;

#[tokio::test]
async fn rollback_publishes_nothing_commit_publishes_once() {
    let ctx = Ctx::new("atom").await;
    let business = format!("{}.orders", ctx.schema);
    sqlx::raw_sql(&format!("CREATE TABLE {business} (id int PRIMARY KEY)"))
        .execute(&ctx.pool)
        .await
        .unwrap();

    // Rolled back: neither the business row nor the event exists.
    let mut tx = ctx.pool.begin().await.unwrap();
    sqlx::query(&format!("INSERT INTO {business} VALUES (1)"))
        .execute(&mut *tx)
        .await
        .unwrap();
    let rolled = ctx
        .outbox
        .enqueue(&mut tx, ctx.event("k", 1))
        .await
        .unwrap();
    tx.rollback().await.unwrap();

    // Committed: business row and events together.
    let mut tx = ctx.pool.begin().await.unwrap();
    sqlx::query(&format!("INSERT INTO {business} VALUES (2)"))
        .execute(&mut *tx)
        .await
        .unwrap();
    let one = ctx
        .outbox
        .enqueue(&mut tx, ctx.event("k", 2))
        .await
        .unwrap();
    let many = ctx
        .outbox
        .enqueue_many(
            &mut tx,
            vec![ctx.event("k", 3), ctx.event("k", 4), ctx.event("j", 1)],
        )
        .await
        .unwrap();
    tx.commit().await.unwrap();
    assert!(
        many.windows(2).all(|w| w[0].id < w[1].id),
        "enqueue_many keeps order"
    );
    assert!(one.id < many[0].id);

    let rows: i64 = sqlx::query_scalar(&format!("SELECT count(*) FROM {}.outbox", ctx.schema))
        .fetch_one(&ctx.pool)
        .await
        .unwrap();
    assert_eq!(rows, 4);

    let redis = postbox_testkit::redis_url();
    let _relay = ctx.relay(&redis, &[], &[]);
    let view = RedisView::new(&redis, &ctx.queue).await;
    wait_until(LONG, "4 jobs", || async { ctx.unsent().await == 0 }).await;
    let seen = view.waiting().await;
    assert_eq!(seen.len(), 4);
    assert!(
        !seen
            .iter()
            .any(|(id, _, _)| *id == rolled.event_id.to_string()),
        "rolled-back event published"
    );
    let k: Vec<&str> = seen
        .iter()
        .filter(|s| s.1 == "k")
        .map(|s| s.0.as_str())
        .collect();
    assert_eq!(
        k[0],
        one.event_id.to_string(),
        "the single enqueue precedes enqueue_many"
    );
    assert_per_key_order(&seen);
    ctx.cleanup().await;
}

#[tokio::test]
async fn invalid_events_are_refused_before_the_database() {
    let ctx = Ctx::new("badev").await;
    let mut tx = ctx.pool.begin().await.unwrap();
    let e = ctx
        .outbox
        .enqueue(&mut tx, Event::new("", "x", serde_json::json!({})))
        .await
        .unwrap_err();
    assert!(e.to_string().contains("topic is empty"), "{e}");
    let mut ev = ctx.event("k", 1);
    ev.headers = serde_json::json!([1]);
    let e = ctx.outbox.enqueue(&mut tx, ev).await.unwrap_err();
    assert!(
        e.to_string().contains("headers must be a JSON object"),
        "{e}"
    );
    tx.rollback().await.unwrap();
    assert!(postbox::Outbox::new("Bad Schema").is_err());
    ctx.cleanup().await;
}

#[tokio::test]
async fn plain_sql_producer_wakes_the_relay() {
    // What a Node `pg` producer does: a plain INSERT in its own transaction.
    let ctx = Ctx::new("plainsql").await;
    let redis = postbox_testkit::redis_url();
    // Polling set far away: only the NOTIFY trigger can deliver within the wait.
    let relay = ctx.relay(&redis, &["--poll-interval", "60s"], &[]);
    relay.wait_for_line("relay started", LONG).await;
    // Let the workers take their partitions and go idle.
    wait_until(LONG, "workers to own partitions", || async {
        let n: i64 = sqlx::query_scalar("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objsubid = 2 AND classid::int4 = hashtext('postbox.partition.' || $1)")
            .bind(&ctx.schema)
            .fetch_one(&ctx.pool)
            .await
            .unwrap();
        n == 64
    })
    .await;
    sqlx::query(&format!(
        "INSERT INTO {}.outbox (topic, event, key, payload) VALUES ($1, 'order.created', 'o-1', '{{\"key\":\"o-1\",\"seq\":1}}')",
        ctx.schema
    ))
    .bind(&ctx.queue)
    .execute(&ctx.pool)
    .await
    .unwrap();
    let view = RedisView::new(&redis, &ctx.queue).await;
    wait_until(
        std::time::Duration::from_secs(10),
        "the NOTIFY to wake the relay",
        || async { ctx.unsent().await == 0 },
    )
    .await;
    assert_eq!(view.wait_len().await, 1);
    ctx.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listener_reconnects_after_its_session_is_killed() {
    let ctx = Ctx::new("relisten").await;
    let redis = postbox_testkit::redis_url();
    let relay = ctx.relay(&redis, &["--poll-interval", "60s"], &[]);
    relay.wait_for_line("relay started", LONG).await;
    let app = format!("postbox-relay:{}:%:listen", relay.pid());
    let listener_pid = |pool: sqlx::PgPool, app: String| async move {
        sqlx::query_scalar::<_, i32>("SELECT pid FROM pg_stat_activity WHERE application_name LIKE $1 AND query LIKE 'LISTEN%'")
            .bind(app)
            .fetch_optional(&pool)
            .await
            .unwrap()
    };
    wait_until(LONG, "the listener session", || {
        listener_pid(ctx.pool.clone(), app.clone()).map(|p| p.is_some())
    })
    .await;
    let old = listener_pid(ctx.pool.clone(), app.clone()).await.unwrap();
    sqlx::query("SELECT pg_terminate_backend($1)")
        .bind(old)
        .execute(&ctx.pool)
        .await
        .unwrap();
    wait_until(LONG, "a new listener session", || {
        listener_pid(ctx.pool.clone(), app.clone()).map(move |p| p.is_some_and(|p| p != old))
    })
    .await;
    // Polling is a minute away: only the re-established LISTEN can deliver this quickly.
    delivered_promptly(&ctx, "k", "delivery through the new listener").await;
    assert!(
        relay.output().contains("relay listener") && relay.output().contains("reconnecting"),
        "{}",
        relay.output()
    );
    ctx.cleanup().await;
}

/// Count NOTIFYs on the relay's channel for `schema` while `work` runs.
async fn notifications_during<F: std::future::Future<Output = ()>>(schema: &str, work: F) -> usize {
    let mut l = sqlx::postgres::PgListener::connect(&postbox_testkit::database_url())
        .await
        .unwrap();
    l.listen(postbox::NOTIFY_CHANNEL).await.unwrap();
    work.await;
    // Notifications of committed transactions are queued for us by now;
    // drain them without waiting for more.
    let mut n = 0;
    while let Ok(Ok(Some(m))) =
        tokio::time::timeout(std::time::Duration::from_millis(300), l.try_recv()).await
    {
        if m.payload() == schema {
            n += 1;
        }
    }
    n
}

/// One event of `key`, delivered within 10 s: sooner than any poll these
/// tests configure, so only a wake-up (or a busy poll) can have done it.
async fn delivered_promptly(ctx: &Ctx, key: &str, what: &str) {
    ctx.produce(vec![ctx.event(key, 1)]).await;
    wait_until(std::time::Duration::from_secs(10), what, || async {
        ctx.unsent().await == 0
    })
    .await;
}

/// A test schema migrated with `--notify adaptive`.
async fn adaptive_ctx(prefix: &str) -> Ctx {
    let ctx = Ctx::new(prefix).await;
    let schema = postbox::SchemaName::new(&ctx.schema).unwrap();
    let mut conn = ctx.pool.acquire().await.unwrap();
    postbox::migrate::run(&mut conn, &schema, postbox::migrate::WakeUp::Adaptive)
        .await
        .unwrap();
    ctx
}

/// `--notify adaptive`: an idle relay is woken by the first commit at once
/// (its partitions are armed), and while it is busy producers skip the NOTIFY;
/// every event still arrives, in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn adaptive_notify_wakes_an_idle_relay_and_spares_busy_producers() {
    let ctx = adaptive_ctx("adaptive").await;
    let redis = postbox_testkit::redis_url();
    // Polling far away: only a NOTIFY or the busy-poll can deliver in time.
    let relay = ctx.relay(
        &redis,
        &["--poll-interval", "60s", "--busy-poll-for", "300ms"],
        &[],
    );
    let armed = || armed_partitions(&ctx.pool, &ctx.schema);
    wait_until(
        LONG,
        "the idle relay to consolidate and arm all 64 partitions",
        || async { asleep_consolidated(&ctx.pool, &ctx.schema, 1).await },
    )
    .await;

    // One plain-SQL insert to an idle relay: woken by its NOTIFY.
    let n = notifications_during(&ctx.schema, async {
        delivered_promptly(&ctx, "k0", "the NOTIFY to wake the idle relay").await;
    })
    .await;
    assert_eq!(n, 1, "the commit to an idle relay notified");

    // A stream of 300 one-row transactions while the relay stays awake: few NOTIFYs.
    const N: usize = 300;
    let n = notifications_during(&ctx.schema, async {
        let events = (0..N)
            .map(|i| ctx.event(&format!("k{}", i % 4), i / 4 + 2))
            .collect();
        ctx.produce(events).await;
        wait_until(LONG, "all events relayed", || async {
            ctx.unsent().await == 0
        })
        .await;
    })
    .await;
    assert!(
        n < N / 5,
        "{n} NOTIFYs for {N} transactions: a busy relay should spare most producers"
    );
    let view = RedisView::new(&redis, &ctx.queue).await;
    let seen = view.waiting().await;
    assert_eq!(seen.len(), N + 1);
    assert_per_key_order(&seen);
    wait_until(
        LONG,
        "the relay to arm its partitions again when idle",
        || async { armed().await == 64 },
    )
    .await;
    drop(relay);
    ctx.cleanup().await;
}

/// Armed locks follow partition ownership: when a second relay joins, the
/// first gives back half its partitions and their armed locks with them, so
/// the newcomer can arm them and no producer NOTIFYs for a busy worker; and
/// when a relay's workers consolidate, the ones standing by give theirs back
/// too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn armed_locks_follow_partitions_between_relays() {
    let ctx = adaptive_ctx("armed_move").await;
    let redis = postbox_testkit::redis_url();
    let args = ["--poll-interval", "60s", "--busy-poll-for", "100ms"];
    // Armed locks held by a session that does not own the partition.
    let stray = || async {
        sqlx::query_scalar::<_, i64>(
            "SELECT count(*) FROM pg_locks a
              WHERE a.locktype = 'advisory' AND a.granted AND a.objsubid = 2
                AND a.classid = hashtext('postbox.armed.' || $1)::oid
                AND NOT EXISTS (
                    SELECT 1 FROM pg_locks o
                     WHERE o.locktype = 'advisory' AND o.granted AND o.objsubid = 2
                       AND o.classid = hashtext('postbox.partition.' || $1)::oid
                       AND o.objid = a.objid AND o.pid = a.pid)",
        )
        .bind(&ctx.schema)
        .fetch_one(&ctx.pool)
        .await
        .unwrap()
    };
    let first = ctx.relay(&redis, &args, &[]);
    wait_until(
        LONG,
        "the first relay to consolidate and arm all 64 partitions",
        || async { asleep_consolidated(&ctx.pool, &ctx.schema, 1).await },
    )
    .await;
    let second = ctx.relay(&redis, &args, &[]);
    wait_until(
        LONG,
        "both relays consolidated and asleep, each armed on what it owns",
        || async {
            let sessions: i64 = sqlx::query_scalar(
                "SELECT count(DISTINCT pid) FROM pg_locks
                  WHERE locktype = 'advisory' AND granted AND objsubid = 2
                    AND classid = hashtext('postbox.armed.' || $1)::oid",
            )
            .bind(&ctx.schema)
            .fetch_one(&ctx.pool)
            .await
            .unwrap();
            sessions == 2 && armed_partitions(&ctx.pool, &ctx.schema).await == 64
        },
    )
    .await;
    assert_eq!(stray().await, 0);
    // Both asleep: one commit wakes its partition's owner, whichever relay.
    delivered_promptly(&ctx, "k0", "the NOTIFY to wake the owner").await;
    drop(second);
    drop(first);
    ctx.cleanup().await;
}

/// Arming does not wait for producers: while a long commit holds the shared
/// side of every partition's armed lock, the relay stays awake (polling
/// shortly, since it could not arm) and still delivers at once; it arms when
/// the commit ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn arming_never_waits_for_a_committing_producer() {
    let ctx = adaptive_ctx("arm_nowait").await;
    // A producer's commit as the trigger leaves it: the shared armed locks held.
    let mut slow = ctx.pool.begin().await.unwrap();
    let held: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM generate_series(0, 63) p
          WHERE pg_try_advisory_xact_lock_shared(hashtext('postbox.armed.' || $1), p)",
    )
    .bind(&ctx.schema)
    .fetch_one(&mut *slow)
    .await
    .unwrap();
    assert_eq!(held, 64);
    let redis = postbox_testkit::redis_url();
    let relay = ctx.relay(
        &redis,
        &["--poll-interval", "60s", "--busy-poll-for", "100ms"],
        &[],
    );
    relay.wait_for_line("relay started", LONG).await;
    // Past busy_poll_for, the workers have tried to arm. A refused try leaves
    // nothing to observe (that is the point), so this waits out the time.
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    delivered_promptly(&ctx, "k0", "delivery while arming is refused").await;
    assert_eq!(armed_partitions(&ctx.pool, &ctx.schema).await, 0);
    slow.rollback().await.unwrap();
    wait_until(LONG, "all 64 armed once the commit ended", || async {
        armed_partitions(&ctx.pool, &ctx.schema).await == 64
    })
    .await;
    drop(relay);
    ctx.cleanup().await;
}

/// A batch with one bad event names that event (its index and topic) and why,
/// and writes none of the batch.
#[tokio::test]
async fn enqueue_many_names_the_invalid_event_and_writes_nothing() {
    let ctx = Ctx::new("many_bad").await;
    let mut bad = ctx.event("k", 2);
    bad.headers = serde_json::json!(["not", "an", "object"]);
    let mut tx = ctx.pool.begin().await.unwrap();
    let err = ctx
        .outbox
        .enqueue_many(&mut tx, vec![ctx.event("k", 1), bad, ctx.event("k", 3)])
        .await
        .unwrap_err();
    tx.commit().await.unwrap();
    assert!(
        matches!(
            &err,
            postbox::EnqueueError::InvalidEventInBatch {
                index: 1,
                count: 3,
                ..
            }
        ),
        "{err:?}"
    );
    let text = err.to_string();
    assert!(
        text.contains("index 1 of 3")
            && text.contains(&ctx.queue)
            && text.contains("headers must be a JSON object, got an array")
            && text.contains("none of the 3 events was written"),
        "{text}"
    );
    let rows: i64 = sqlx::query_scalar(&format!("SELECT count(*) FROM {}.outbox", ctx.schema))
        .fetch_one(&ctx.pool)
        .await
        .unwrap();
    assert_eq!(rows, 0);
    ctx.cleanup().await;
}
