//! The logical wake-up delivers without a trigger, leaves no slot behind,
//! and reconnects when its walsender is terminated.

use super::*;

/// On a logical server: no trigger, an insert-only publication, one temporary
/// slot; events arrive quickly and in per-key order with polling a minute
/// away; the slot is gone when the relay is stopped or killed; another policy
/// drops the publication again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logical_wakeup_delivers_without_trigger_and_leaves_no_slot() {
    let pg = PgCluster::start_logical().await;
    let redis = RedisServer::start().await;
    let url = pg.url();
    let pool = private_pool(&url).await;
    let schema = postbox_testkit::unique_schema("logical");
    let queue = format!("{schema}-q");
    let out = migrate(&url, &schema, "logical");
    assert_ok(&out);
    assert!(String::from_utf8_lossy(&out.stdout).contains("applied migrations"));
    assert!(
        triggers(&pool, &schema).await.is_empty(),
        "no NOTIFY trigger"
    );
    let (_, ins, upd, del) = publication(&pool, &schema).await.expect("publication");
    assert!(ins && !upd && !del, "inserts only");

    let relay1 = relay(&url, &schema, &redis.url());
    relay1
        .wait_for_line("logical wake-up streaming", LONG)
        .await;
    let s = slots(&pool).await;
    assert!(
        s.len() == 1 && s[0].1,
        "one temporary slot while it runs: {s:?}"
    );
    assert!(s[0].0.starts_with("postbox_relay_"), "{s:?}");
    wait_idle(&pool, &schema).await;

    // A burst over four keys, one transaction each.
    const N: usize = 40;
    let outbox = Outbox::new(&schema).unwrap();
    let started = Instant::now();
    produce(
        &pool,
        &outbox,
        (0..N)
            .map(|i| event(&queue, &format!("k{}", i % 4), i))
            .collect(),
    )
    .await;
    let view = RedisView::new(&redis.url(), &queue).await;
    wait_until(
        QUICK,
        "the burst delivered through logical wake-up",
        || async { view.wait_len().await == N },
    )
    .await;
    eprintln!(
        "{N} events delivered {:?} after the first insert",
        started.elapsed()
    );
    assert_per_key_order(&view.waiting().await);

    // One event to a relay that went back to sleep.
    wait_idle(&pool, &schema).await;
    produce(&pool, &outbox, vec![event(&queue, "k0", N)]).await;
    wait_until(QUICK, "one event to an idle relay", || async {
        unsent(&pool, &schema).await == 0
    })
    .await;
    assert_eq!(view.wait_len().await, N + 1);

    // Stopped: exits 0, and the temporary slot is gone with its session.
    relay1.signal("TERM");
    let mut relay1 = relay1;
    assert_eq!(relay1.wait(LONG).await, Some(0), "{}", relay1.output());
    wait_until(Duration::from_secs(10), "no slot after SIGTERM", || async {
        slots(&pool).await.is_empty()
    })
    .await;

    // Killed: the server drops the slot when it notices the session is gone.
    let mut relay2 = relay(&url, &schema, &redis.url());
    relay2
        .wait_for_line("logical wake-up streaming", LONG)
        .await;
    assert_eq!(slots(&pool).await.len(), 1);
    relay2.signal("KILL");
    assert_eq!(relay2.wait(LONG).await, None);
    wait_until(Duration::from_secs(20), "no slot after SIGKILL", || async {
        slots(&pool).await.is_empty()
    })
    .await;

    // Another policy drops the publication; logical again brings it back.
    assert_ok(&migrate(&url, &schema, "adaptive"));
    assert_eq!(publication(&pool, &schema).await, None);
    assert_eq!(triggers(&pool, &schema).await, ["outbox_notify_adaptive"]);
    assert_ok(&migrate(&url, &schema, "logical"));
    assert!(publication(&pool, &schema).await.is_some());
    assert!(triggers(&pool, &schema).await.is_empty());
}

/// The walsender is terminated: a row committed in the gap and one committed
/// after the new session started are both delivered quickly (the relay
/// reconnects and rescans every logical schema).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logical_wakeup_reconnects_after_its_walsender_is_terminated() {
    let pg = PgCluster::start_logical().await;
    let redis = RedisServer::start().await;
    let url = pg.url();
    let pool = private_pool(&url).await;
    let schema = postbox_testkit::unique_schema("logrecon");
    let queue = format!("{schema}-q");
    let mut conn = pool.acquire().await.unwrap();
    postbox::migrate::run(
        &mut conn,
        &SchemaName::new(&schema).unwrap(),
        WakeUp::Logical,
    )
    .await
    .unwrap();
    drop(conn);
    let relay = relay(&url, &schema, &redis.url());
    relay.wait_for_line("logical wake-up streaming", LONG).await;
    wait_idle(&pool, &schema).await;
    let walsender = || async {
        sqlx::query_scalar::<_, i32>(
            "SELECT pid FROM pg_stat_replication WHERE application_name LIKE 'postbox-relay:%:logical'",
        )
        .fetch_optional(&pool)
        .await
        .unwrap()
    };
    let old = walsender().await.expect("the relay's walsender");
    let killed: bool = sqlx::query_scalar("SELECT pg_terminate_backend($1)")
        .bind(old)
        .fetch_one(&pool)
        .await
        .unwrap();
    assert!(killed);
    let outbox = Outbox::new(&schema).unwrap();
    // Committed while the stream is (most likely) down.
    produce(&pool, &outbox, vec![event(&queue, "k", 1)]).await;
    wait_until(QUICK, "the row committed in the gap", || async {
        unsent(&pool, &schema).await == 0
    })
    .await;
    wait_until(LONG, "a new walsender", || async {
        walsender().await.is_some_and(|p| p != old)
    })
    .await;
    wait_idle(&pool, &schema).await;
    produce(&pool, &outbox, vec![event(&queue, "k", 2)]).await;
    wait_until(QUICK, "a row through the new session", || async {
        unsent(&pool, &schema).await == 0
    })
    .await;
    let view = RedisView::new(&redis.url(), &queue).await;
    let seen = view.waiting().await;
    assert_eq!(seen.len(), 2);
    assert_per_key_order(&seen);
    let log = relay.output();
    assert!(
        log.contains("logical wake-up stream failed") && log.contains("reconnecting"),
        "{log}"
    );
    assert_eq!(
        slots(&pool).await.len(),
        1,
        "the old slot went with its session"
    );
}
