//! kill -9 between publish and commit: the next relay republishes, BullMQ absorbs it.

use crate::support::*;
use std::collections::HashSet;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_between_publish_and_commit_loses_nothing_duplicates_nothing() {
    let ctx = Ctx::new("failpt").await;
    let redis = postbox_testkit::redis_url();
    ctx.produce(
        (0..30)
            .map(|i| ctx.event(&format!("k{}", i % 3), i / 3 + 1))
            .collect(),
    )
    .await;

    let mut doomed = ctx.relay(
        &redis,
        &["--workers", "1"],
        &[("POSTBOX_FAILPOINT", "after_publish")],
    );
    doomed.wait_for_line("failpoint after_publish", LONG).await;
    doomed.signal("KILL");
    doomed.wait(LONG).await;

    // Published but never marked: the rows are all still unsent.
    let view = RedisView::new(&redis, &ctx.queue).await;
    let published = view.wait_len().await;
    assert!(published > 0, "the failpoint fires after the publish");
    assert_eq!(ctx.unsent().await, 30, "nothing was marked before the kill");

    let relay = ctx.relay(&redis, &[], &[]);
    wait_until(LONG, "all rows marked sent", || async {
        ctx.unsent().await == 0
    })
    .await;
    let seen = view.waiting().await;
    assert_eq!(seen.len(), 30, "no second job for a republished event");
    assert_eq!(seen.iter().map(|s| &s.0).collect::<HashSet<_>>().len(), 30);
    assert_per_key_order(&seen);
    drop(relay);
    ctx.cleanup().await;
}

/// A relay whose task panics must not keep running headless nor exit 0: a
/// supervisor with `Restart=on-failure` has to see the failure.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_relay_task_stops_the_relay_with_a_failure_status() {
    let ctx = Ctx::new("taskpanic").await;
    let redis = postbox_testkit::redis_url();
    let mut relay = ctx.relay(
        &redis,
        &["--workers", "1"],
        &[("POSTBOX_FAILPOINT", "panic_worker")],
    );
    let code = relay.wait(LONG).await;
    let out = relay.output();
    assert!(
        matches!(code, Some(c) if c != 0),
        "exit status {code:?}\n{out}"
    );
    assert!(
        out.contains(&format!("relay task worker {}#0 failed", ctx.schema)),
        "the log names the task:\n{out}"
    );
    ctx.cleanup().await;
}
