//! Transactions that commit out of id order, a rollback, and a long-open
//! transaction: nothing skipped, nothing phantom, no head-of-line blocking.

use crate::support::*;
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn out_of_order_commits_rollback_and_held_transaction() {
    let ctx = Ctx::new("corder").await;
    let redis = postbox_testkit::redis_url();
    let relay = ctx.relay(&redis, &["--workers", "1"], &[]);
    relay.wait_for_line("relay started", LONG).await;
    let view = RedisView::new(&redis, &ctx.queue).await;

    // H takes the lowest id and stays open.
    let mut held = ctx.pool.begin().await.unwrap();
    let h = ctx
        .outbox
        .enqueue(&mut held, ctx.event("held", 1))
        .await
        .unwrap();

    // Overlapping X and Y on key b: Y (higher id) commits first. Either order is
    // correct for overlapping transactions; both must arrive.
    let mut x = ctx.pool.begin().await.unwrap();
    let xe = ctx.outbox.enqueue(&mut x, ctx.event("b", 1)).await.unwrap();
    let mut y = ctx.pool.begin().await.unwrap();
    let ye = ctx.outbox.enqueue(&mut y, ctx.event("b", 2)).await.unwrap();
    y.commit().await.unwrap();

    // Key a: a1 committed, a rolled-back event, then a2 (causally after a1).
    ctx.produce(vec![ctx.event("a", 1)]).await;
    let mut rb = ctx.pool.begin().await.unwrap();
    let rolled = ctx
        .outbox
        .enqueue(&mut rb, ctx.event("a", 99))
        .await
        .unwrap();
    rb.rollback().await.unwrap();
    ctx.produce(vec![ctx.event("a", 2)]).await;
    x.commit().await.unwrap();

    // Everything committed arrives while H is still open: no waiting behind it.
    wait_until(
        Duration::from_secs(10),
        "committed events while H is open",
        || async { view.wait_len().await == 4 },
    )
    .await;
    let before: Vec<String> = view.waiting_ids().await;
    assert!(!before.contains(&h.event_id.to_string()));

    // H commits last, with the lowest id: it is found, not skipped.
    held.commit().await.unwrap();
    wait_until(Duration::from_secs(10), "the late low-id event", || async {
        view.wait_len().await == 5
    })
    .await;

    let seen = view.waiting().await;
    let ids: Vec<&str> = seen.iter().map(|s| s.0.as_str()).collect();
    assert!(
        !ids.contains(&rolled.event_id.to_string().as_str()),
        "rolled-back event published"
    );
    assert!(
        ids.contains(&xe.event_id.to_string().as_str())
            && ids.contains(&ye.event_id.to_string().as_str())
    );
    let a: Vec<u64> = seen.iter().filter(|s| s.1 == "a").map(|s| s.2).collect();
    assert_eq!(a, vec![1, 2], "key a in causal order");
    // Jobs reach Redis before the relay commits their marks.
    wait_until(Duration::from_secs(10), "every row marked sent", || async {
        ctx.unsent().await == 0
    })
    .await;
    drop(relay);
    ctx.cleanup().await;
}

/// A transaction that took its xid early (it wrote something else first) and
/// sat idle while the relay sent the others' events past it, then wrote its
/// event and committed: its xid is below the relay's positions, so the relay
/// finds the row by that xid (an open transaction when the positions passed
/// it), and the others never waited for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_writer_holds_nothing_back_and_arrives_when_it_commits() {
    let ctx = Ctx::new("idlewr").await;
    let redis = postbox_testkit::redis_url();
    let relay = ctx.relay(&redis, &["--workers", "1"], &[]);
    relay.wait_for_line("relay started", LONG).await;
    let view = RedisView::new(&redis, &ctx.queue).await;

    let mut writer = ctx.pool.begin().await.unwrap();
    sqlx::query("SELECT pg_current_xact_id()")
        .execute(&mut *writer)
        .await
        .unwrap();
    for seq in 1..=30 {
        ctx.produce(vec![ctx.event(&format!("k{}", seq % 5), seq)])
            .await;
    }
    wait_until(
        Duration::from_secs(10),
        "the others' events while the writer is open",
        || async { view.wait_len().await == 30 },
    )
    .await;

    // On a key the others used; the oldest xid of all, committed last.
    let late = ctx
        .outbox
        .enqueue(&mut writer, ctx.event("k1", 1000))
        .await
        .unwrap();
    writer.commit().await.unwrap();
    wait_until(
        Duration::from_secs(10),
        "the idle writer's event",
        || async { view.wait_len().await == 31 },
    )
    .await;
    assert!(view
        .waiting_ids()
        .await
        .contains(&late.event_id.to_string()));
    // And the relay goes on past it.
    ctx.produce(vec![ctx.event("k1", 1001)]).await;
    wait_until(Duration::from_secs(10), "an event after it", || async {
        view.wait_len().await == 32
    })
    .await;
    assert_per_key_order(&view.waiting().await);
    wait_until(Duration::from_secs(10), "every row marked sent", || async {
        ctx.unsent().await == 0
    })
    .await;
    drop(relay);
    ctx.cleanup().await;
}
