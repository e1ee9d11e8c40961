//! How the BullMQ sink sends a batch: one `MULTI`/`EXEC` transaction by
//! default, waves when a transaction could not keep a key's order.

use crate::support::*;
use postbox::Event;
use redis::AsyncCommands;

/// Make every add to `queue` fail inside Redis: its meta key is a string,
/// so BullMQ's add script gets `WRONGTYPE` (what a corrupted or foreign key
/// would do), while adds to other queues succeed.
async fn break_queue(redis: &str, queue: &str) {
    let mut c = redis::Client::open(redis)
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let _: () = c
        .set(format!("bull:{queue}:meta"), "not a hash")
        .await
        .unwrap();
}

/// One producer transaction, so the relay claims it as one batch.
async fn produce_together(ctx: &Ctx, events: Vec<Event>) {
    let mut tx = ctx.pool.begin().await.unwrap();
    ctx.outbox.enqueue_many(&mut tx, events).await.unwrap();
    tx.commit().await.unwrap();
}

async fn blocked_rows(ctx: &Ctx) -> Vec<(String, i32)> {
    sqlx::query_as(&format!(
        "SELECT key, attempts FROM {}.outbox WHERE next_attempt_at = 'infinity' ORDER BY id",
        ctx.schema
    ))
    .fetch_all(&ctx.pool)
    .await
    .unwrap()
}

fn relay_args<'a>(blocked: &'a str, mode: &'a str) -> Vec<&'a str> {
    let mut args = FAST_DEAD_LETTER.to_vec();
    args.extend(["--block-topics", blocked, "--bullmq-publish", mode]);
    args
}

/// An error inside the transaction (one queue refuses its adds) is found
/// job by job: the healthy queue's events are delivered in order, the
/// refused key is blocked at its first event, nothing else of it is sent.
#[tokio::test(flavor = "multi_thread")]
async fn an_error_inside_the_transaction_fails_only_the_refused_jobs() {
    let ctx = Ctx::new("pm_tx").await;
    let redis = postbox_testkit::redis_url();
    let broken = format!("{}-broken", ctx.queue);
    break_queue(&redis, &broken).await;
    let mut events: Vec<Event> = (1..=5).map(|n| event(&ctx.queue, "a", n)).collect();
    events.extend((1..=3).map(|n| event(&broken, "b", n)));
    events.extend((1..=5).map(|n| event(&ctx.queue, "c", n)));
    produce_together(&ctx, events).await;

    let blocked = format!("{broken}*");
    let relay = ctx.relay(&redis, &relay_args(&blocked, "transaction"), &[]);
    relay.wait_for_line("its key is blocked", LONG).await;
    let view = RedisView::new(&redis, &ctx.queue).await;
    wait_until(LONG, "the healthy queue's 10 events", || async {
        view.wait_len().await == 10
    })
    .await;
    let seen = view.waiting().await;
    assert_per_key_order(&seen);
    // The line is logged just before the relay commits the block.
    wait_until(LONG, "b blocked at its first event", || async {
        blocked_rows(&ctx).await == vec![("b".to_owned(), 2)]
    })
    .await;
    assert_eq!(ctx.unsent().await, 3, "b's three events stay unsent");
    assert!(relay.output().contains("WRONGTYPE"), "{}", relay.output());
    ctx.cleanup().await;
}

/// A key whose events go to two queues is sent in waves: when its event to
/// the refusing queue fails, its later event to the healthy queue is not
/// added (a transaction would already have added it, ahead of its
/// predecessor).
#[tokio::test(flavor = "multi_thread")]
async fn a_key_spanning_queues_stops_at_its_failure() {
    let ctx = Ctx::new("pm_span").await;
    let redis = postbox_testkit::redis_url();
    let broken = format!("{}-broken", ctx.queue);
    break_queue(&redis, &broken).await;
    produce_together(
        &ctx,
        vec![
            event(&ctx.queue, "k", 1),
            event(&broken, "k", 2),
            event(&ctx.queue, "k", 3),
            event(&ctx.queue, "other", 1),
            event(&ctx.queue, "other", 2),
        ],
    )
    .await;

    let blocked = format!("{broken}*");
    let relay = ctx.relay(&redis, &relay_args(&blocked, "transaction"), &[]);
    relay.wait_for_line("its key is blocked", LONG).await;
    let view = RedisView::new(&redis, &ctx.queue).await;
    // Blocked after its second attempt: the first batch finished long before.
    wait_until(LONG, "k1 and the other key", || async {
        view.wait_len().await >= 3
    })
    .await;
    let seen: Vec<(String, u64)> = view
        .waiting()
        .await
        .into_iter()
        .map(|(_, k, s)| (k, s))
        .collect();
    assert!(
        !seen.contains(&("k".to_owned(), 3)),
        "k3 was added while k2 is blocked: {seen:?}"
    );
    wait_until(LONG, "k blocked at k2", || async {
        blocked_rows(&ctx).await == vec![("k".to_owned(), 2)]
    })
    .await;
    ctx.cleanup().await;
}

/// Both modes deliver the same jobs, in per-key order, over several batches.
#[tokio::test(flavor = "multi_thread")]
async fn transaction_and_waves_deliver_the_same_jobs_in_order() {
    for mode in ["transaction", "waves"] {
        let ctx = Ctx::new("pm_same").await;
        let redis = postbox_testkit::redis_url();
        let mut events = Vec::new();
        for seq in 1..=40 {
            for key in ["x", "y", "z"] {
                events.push(ctx.event(key, seq));
            }
        }
        produce_together(&ctx, events).await;
        let _relay = ctx.relay(
            &redis,
            &["--batch-size", "16", "--bullmq-publish", mode],
            &[],
        );
        let view = RedisView::new(&redis, &ctx.queue).await;
        wait_until(LONG, "120 jobs", || async { view.wait_len().await == 120 }).await;
        wait_until(LONG, "all marked sent", || async {
            ctx.unsent().await == 0
        })
        .await;
        let seen = view.waiting().await;
        assert_per_key_order(&seen);
        ctx.cleanup().await;
    }
}
