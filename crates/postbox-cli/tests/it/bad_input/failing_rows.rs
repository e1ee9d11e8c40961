//! Rows a sink refuses: dead-lettered or held by the key's policy, retried
//! on time, while other keys flow.

use super::*;
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn payload_that_is_not_an_object_is_dead_lettered_and_others_flow() {
    let ctx = Ctx::new("poison").await;
    let redis = postbox_testkit::redis_url();
    let relay = ctx.relay(&redis, FAST_DEAD_LETTER, &[]);

    // A non-Rust producer wrote a bare number, then more events on the same key and others.
    ctx.produce(vec![ctx.event("p", 1)]).await;
    sqlx::query(&format!(
        "INSERT INTO {}.outbox (topic, event, key, payload) VALUES ($1, 'test.event', 'p', '42')",
        ctx.schema
    ))
    .bind(&ctx.queue)
    .execute(&ctx.pool)
    .await
    .unwrap();
    ctx.produce(vec![
        ctx.event("p", 3),
        ctx.event("q", 1),
        ctx.event("q", 2),
    ])
    .await;

    wait_until(
        LONG,
        "the poison row dead-lettered and the rest sent",
        || async { ctx.unsent().await == 0 && ctx.dead_letters().await.len() == 1 },
    )
    .await;
    let dl = ctx.dead_letters().await;
    assert!(
        dl[0].1.contains("must be a JSON object") && dl[0].1.contains("attempt 2 of 2"),
        "{}",
        dl[0].1
    );
    let view = RedisView::new(&redis, &ctx.queue).await;
    let seen = view.waiting().await;
    let p: Vec<u64> = seen.iter().filter(|s| s.1 == "p").map(|s| s.2).collect();
    assert_eq!(
        p,
        vec![1, 3],
        "the key moved on past its dead letter, in order"
    );
    assert_eq!(seen.len(), 4);
    assert!(relay.output().contains("dead-lettered"));
    drop(relay);
    ctx.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_poison_row_holds_back_its_key_only() {
    let ctx = Ctx::new("hold").await;
    let redis = postbox_testkit::redis_url();
    let relay = ctx.relay(
        &redis,
        &["--max-attempts", "100", "--retry-min", "30s"],
        &[],
    );
    sqlx::query(&format!("INSERT INTO {}.outbox (topic, event, key, payload) VALUES ($1, 'test.event', 'p', '\"str\"')", ctx.schema))
        .bind(&ctx.queue)
        .execute(&ctx.pool)
        .await
        .unwrap();
    ctx.produce(vec![ctx.event("p", 2), ctx.event("q", 1)])
        .await;
    let view = RedisView::new(&redis, &ctx.queue).await;
    wait_until(LONG, "other keys flow", || async {
        view.wait_len().await == 1
    })
    .await;
    relay.wait_for_line("will retry", LONG).await;
    // The line is logged just before the relay commits the failure.
    let failure = || async {
        sqlx::query_as::<_, (i32, Option<String>)>(&format!(
            "SELECT attempts, last_error FROM {}.outbox WHERE key = 'p' ORDER BY id LIMIT 1",
            ctx.schema
        ))
        .fetch_one(&ctx.pool)
        .await
        .unwrap()
    };
    wait_until(LONG, "the failure committed", || async {
        failure().await.1.is_some()
    })
    .await;
    let (attempts, err) = failure().await;
    let err = err.unwrap();
    assert_eq!(attempts, 1);
    assert!(err.contains("a string"), "{err}");
    // p:2 waits behind the poison row for its whole backoff.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        view.waiting().await.iter().filter(|s| s.1 == "p").count(),
        0
    );
    drop(relay);
    ctx.cleanup().await;
}

/// A retry comes when the log says it will, even sooner than the poll
/// interval: the worker sleeps until the next waiting row is due. (It once
/// waited for the next poll, so `--retry-min 100ms` retried every second.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retries_shorter_than_the_poll_interval_come_on_time() {
    let ctx = Ctx::new("retry_due").await;
    let redis = postbox_testkit::redis_url();
    let relay = ctx.relay(
        &redis,
        &[
            "--max-attempts",
            "5",
            "--retry-min",
            "100ms",
            "--retry-max",
            "100ms",
            "--poll-interval",
            "10s",
        ],
        &[],
    );
    sqlx::query(&format!("INSERT INTO {}.outbox (topic, event, key, payload) VALUES ($1, 'test.event', 'p', '\"str\"')", ctx.schema))
        .bind(&ctx.queue)
        .execute(&ctx.pool)
        .await
        .unwrap();
    let took = || async {
        sqlx::query_scalar::<_, Option<f64>>(&format!(
            "SELECT extract(epoch FROM dead_at - created_at)::float8 FROM {}.outbox_dead_letter",
            ctx.schema
        ))
        .fetch_optional(&ctx.pool)
        .await
        .unwrap()
        .flatten()
    };
    wait_until(LONG, "the row dead-lettered after 5 attempts", || async {
        took().await.is_some()
    })
    .await;
    // Four retries 100 ms apart, not four polls 10 s apart.
    let took = took().await.unwrap();
    assert!(
        took < 5.0,
        "5 attempts took {took:.1}s:\n{}",
        relay.output()
    );
    drop(relay);
    ctx.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn block_policy_holds_the_key_until_an_operator_acts() {
    let ctx = Ctx::new("block").await;
    let redis = postbox_testkit::redis_url();
    let blocked = format!("{}*", ctx.queue);
    let relay = ctx.relay(
        &redis,
        &[FAST_DEAD_LETTER, &["--block-topics", &blocked]].concat(),
        &[],
    );
    sqlx::query(&format!(
        "INSERT INTO {}.outbox (topic, event, key, payload) VALUES ($1, 'test.event', 'p', '7')",
        ctx.schema
    ))
    .bind(&ctx.queue)
    .execute(&ctx.pool)
    .await
    .unwrap();
    ctx.produce(vec![ctx.event("p", 2), ctx.event("q", 1)])
        .await;
    relay.wait_for_line("its key is blocked", LONG).await;
    let view = RedisView::new(&redis, &ctx.queue).await;
    wait_until(LONG, "the other key flows", || async {
        view.wait_len().await == 1
    })
    .await;
    assert!(
        ctx.dead_letters().await.is_empty(),
        "block, not dead-letter"
    );
    let (attempts, blocked): (i32, bool) = sqlx::query_as(&format!("SELECT attempts, next_attempt_at = 'infinity' FROM {}.outbox WHERE key = 'p' ORDER BY id LIMIT 1", ctx.schema))
        .fetch_one(&ctx.pool)
        .await
        .unwrap();
    assert_eq!((attempts, blocked), (2, true));
    // The operator fixes the row and releases it: the key resumes, in order.
    sqlx::query(&format!(
        "UPDATE {}.outbox SET payload = '{{\"key\":\"p\",\"seq\":1}}', next_attempt_at = NULL WHERE key = 'p' AND next_attempt_at = 'infinity'",
        ctx.schema
    ))
    .execute(&ctx.pool)
    .await
    .unwrap();
    wait_until(LONG, "the blocked key delivered after the fix", || async {
        ctx.unsent().await == 0
    })
    .await;
    let p: Vec<u64> = view
        .waiting()
        .await
        .iter()
        .filter(|s| s.1 == "p")
        .map(|s| s.2)
        .collect();
    assert_eq!(p, vec![1, 2]);
    drop(relay);
    ctx.cleanup().await;
}
