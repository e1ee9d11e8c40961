//! Several relays at once: partitions shared, handed over and taken over; a
//! relay keeping up consolidates; SIGTERM finishes the batch in hand;
//! `--sent delete` through a kill. (Every event once and in key order through
//! a relay's SIGKILL is a guarantee of every sink: `conformance::<sink>::
//! events_arrive_once_and_in_key_order_through_relay_kills`.)

use crate::support::*;
use std::collections::HashSet;

/// Partitions held per worker session of `ctx`'s schema, smallest first.
async fn shares(ctx: &Ctx) -> Vec<i64> {
    sqlx::query_scalar(
        "SELECT count(*) FROM pg_locks l
          WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 2
            AND l.classid::int4 = hashtext('postbox.partition.' || $1)
          GROUP BY l.pid ORDER BY 1",
    )
    .bind(&ctx.schema)
    .fetch_all(&ctx.pool)
    .await
    .unwrap()
}

async fn wait_for_shares(ctx: &Ctx, what: &str, want: &[i64]) {
    wait_until(LONG, what, || async { shares(ctx).await == want }).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partitions_are_shared_and_taken_over() {
    let ctx = Ctx::new("share").await;
    let redis = postbox_testkit::redis_url();
    // Each worker keeps its share (no consolidation), to see the shares.
    let args = ["--workers", "2", "--consolidate-after", "0s"];
    let r1 = ctx.relay(&redis, &args, &[]);
    wait_for_shares(&ctx, "one relay to own all 64 partitions", &[32, 32]).await;
    let mut r2 = ctx.relay(&redis, &args, &[]);
    wait_for_shares(
        &ctx,
        "two relays to share the partitions evenly",
        &[16, 16, 16, 16],
    )
    .await;
    // A killed relay cannot say it left: the survivors notice at their tick.
    r2.signal("KILL");
    r2.wait(LONG).await;
    wait_for_shares(&ctx, "the survivor to take over every partition", &[32, 32]).await;
    drop(r1);
    ctx.cleanup().await;
}

/// Joining, giving partitions back and leaving are announced, so partitions
/// change hands at once: with a rebalance tick of ten minutes, every share
/// here can only come from those announcements.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partitions_change_hands_at_once_when_relays_join_and_leave() {
    let ctx = Ctx::new("handover").await;
    let redis = postbox_testkit::redis_url();
    let args = [
        "--workers",
        "2",
        "--rebalance-interval",
        "10m",
        "--session-timeout",
        "11m",
        "--consolidate-after",
        "0s",
    ];
    let r1 = ctx.relay(&redis, &args, &[]);
    wait_for_shares(
        &ctx,
        "the first relay's two workers to split the partitions",
        &[32, 32],
    )
    .await;
    let mut r2 = ctx.relay(&redis, &args, &[]);
    wait_for_shares(&ctx, "a joining relay to get its half", &[16, 16, 16, 16]).await;
    // Rows of every partition are relayed after the hand-over.
    let events: Vec<_> = (0..64).map(|k| ctx.event(&format!("k{k}"), 1)).collect();
    ctx.produce(events).await;
    wait_until(LONG, "events of every partition relayed", || async {
        ctx.unsent().await == 0
    })
    .await;
    r2.signal("TERM");
    assert_eq!(r2.wait(LONG).await, Some(0));
    wait_for_shares(
        &ctx,
        "the remaining relay to take back what the leaving one held",
        &[32, 32],
    )
    .await;
    drop(r1);
    ctx.cleanup().await;
}

/// A relay keeping up consolidates: its first worker holds every partition
/// (two with `--keeping-up-workers 2`), the others stand by; a backlog
/// spreads the partitions over all four workers again. Both hand-overs lose
/// nothing and keep each key's order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keeping_up_relay_consolidates_and_a_backlog_spreads_it() {
    let ctx = Ctx::new("crew").await;
    let redis = postbox_testkit::redis_url();
    // Each batch is held a second, so a backlog of 200 lasts seconds.
    let args = ["--batch-size", "10", "--consolidate-after", "300ms"];
    let relay = ctx.relay(&redis, &args, &[("POSTBOX_FAILPOINT", "slow_publish")]);
    wait_for_shares(&ctx, "the idle relay's first worker to hold all", &[64]).await;
    const N: usize = 200;
    let events = (0..N)
        .map(|i| ctx.event(&format!("k{}", i % 64), i / 64 + 1))
        .collect();
    ctx.produce(events).await;
    wait_for_shares(
        &ctx,
        "a full batch to spread the partitions over the four workers",
        &[16, 16, 16, 16],
    )
    .await;
    wait_until(LONG, "the backlog relayed", || async {
        ctx.unsent().await == 0
    })
    .await;
    wait_for_shares(&ctx, "the relay to consolidate again", &[64]).await;
    let seen = RedisView::new(&redis, &ctx.queue).await.waiting().await;
    assert_eq!(seen.len(), N, "every event arrives exactly once");
    assert_per_key_order(&seen);
    drop(relay);
    // Two keeping up: the first two workers share what one held.
    let args = [&args[..], &["--keeping-up-workers", "2"]].concat();
    let relay = ctx.relay(&redis, &args, &[]);
    wait_for_shares(&ctx, "the first two workers to hold all", &[32, 32]).await;
    drop(relay);
    ctx.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_finishes_and_exits_zero() {
    let ctx = Ctx::new("term").await;
    let redis = postbox_testkit::redis_url();
    let mut relay = ctx.relay(&redis, &[], &[]);
    relay.wait_for_line("relay started", LONG).await;
    ctx.produce((0..20).map(|i| ctx.event("k", i + 1)).collect())
        .await;
    wait_until(LONG, "events relayed", || async { ctx.unsent().await == 0 }).await;
    let asked = std::time::Instant::now();
    relay.signal("TERM");
    assert_eq!(
        relay.wait(std::time::Duration::from_secs(15)).await,
        Some(0),
        "{}",
        relay.output()
    );
    // An idle relay has nothing to finish: it exits at once, not after a
    // client's own timeouts.
    let took = asked.elapsed();
    assert!(
        took < std::time::Duration::from_secs(3),
        "an idle relay took {took:?} to exit after SIGTERM\n{}",
        relay.output()
    );
    assert!(relay.output().contains("relay stopped"));
    // Its partitions are free again (once the server has ended the closed sessions).
    wait_until(std::time::Duration::from_secs(10), "partitions released", || async {
        let held: i64 = sqlx::query_scalar("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND objsubid = 2 AND classid::int4 = hashtext('postbox.partition.' || $1)")
            .bind(&ctx.schema)
            .fetch_one(&ctx.pool)
            .await
            .unwrap();
        held == 0
    })
    .await;
    ctx.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_mid_batch_commits_the_batch_then_exits_zero() {
    let ctx = Ctx::new("termmid").await;
    let redis = postbox_testkit::redis_url();
    ctx.produce((0..10).map(|i| ctx.event("k", i + 1)).collect())
        .await;
    let mut relay = ctx.relay(
        &redis,
        &["--workers", "1"],
        &[("POSTBOX_FAILPOINT", "slow_publish")],
    );
    relay
        .wait_for_line("failpoint slow_publish: holding 10 events", LONG)
        .await;
    relay.signal("TERM");
    assert_eq!(
        relay.wait(std::time::Duration::from_secs(15)).await,
        Some(0),
        "{}",
        relay.output()
    );
    assert_eq!(
        ctx.unsent().await,
        0,
        "the batch in flight was finished and committed"
    );
    let view = RedisView::new(&redis, &ctx.queue).await;
    assert_eq!(view.wait_len().await, 10);
    ctx.cleanup().await;
}

/// `--sent delete`: delivered rows leave the outbox in the claim's
/// transaction. A relay killed between publish and commit leaves them in
/// place (the delete rolls back with it); the next relay republishes them,
/// BullMQ absorbs the duplicates, and order per key holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sent_delete_removes_delivered_rows_and_survives_a_kill() {
    let ctx = Ctx::new("sentdel").await;
    let redis = postbox_testkit::redis_url();
    const N: usize = 400;
    let events = (0..N)
        .map(|i| ctx.event(&format!("k{}", i % 8), i / 8 + 1))
        .collect();
    ctx.produce(events).await;

    let args = ["--sent", "delete", "--workers", "1", "--batch-size", "50"];
    let mut doomed = ctx.relay(&redis, &args, &[("POSTBOX_FAILPOINT", "after_publish")]);
    doomed.wait_for_line("failpoint after_publish", LONG).await;
    doomed.signal("KILL");
    doomed.wait(LONG).await;
    let count = || async {
        sqlx::query_scalar::<_, i64>(&format!("SELECT count(*) FROM {}.outbox", ctx.schema))
            .fetch_one(&ctx.pool)
            .await
            .unwrap()
    };
    assert_eq!(
        count().await,
        N as i64,
        "the killed batch's delete rolled back"
    );

    let r1 = ctx.relay(&redis, &args[..2], &[]);
    let r2 = ctx.relay(&redis, &args[..2], &[]);
    wait_until(LONG, "the outbox to empty", || async { count().await == 0 }).await;
    let view = RedisView::new(&redis, &ctx.queue).await;
    let seen = view.waiting().await;
    let ids: HashSet<&str> = seen.iter().map(|s| s.0.as_str()).collect();
    assert_eq!(
        seen.len(),
        N,
        "every event once, the republished batch absorbed"
    );
    assert_eq!(ids.len(), N);
    assert_per_key_order(&seen);
    drop((r1, r2));
    ctx.cleanup().await;
}
