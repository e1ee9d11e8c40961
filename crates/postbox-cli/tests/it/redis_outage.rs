//! Redis down while producing: rows wait in the outbox (attempts untouched),
//! the relay's memory stays flat, everything arrives once Redis is back.

use crate::support::*;
use std::collections::HashSet;
use std::time::Duration;

fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_down_then_back_delivers_everything() {
    let ctx = Ctx::new("outage").await;
    let mut redis = RedisServer::start().await;
    let relay = ctx.relay(&redis.url(), &["--batch-size", "200"], &[]);
    ctx.produce(
        (0..50)
            .map(|i| ctx.event(&format!("k{}", i % 5), i / 5 + 1))
            .collect(),
    )
    .await;
    wait_until(LONG, "first events relayed", || async {
        ctx.unsent().await == 0
    })
    .await;

    redis.kill();
    // Keep producing while Redis is down: the producer never notices.
    ctx.produce(
        (50..100)
            .map(|i| ctx.event(&format!("k{}", i % 5), i / 5 + 1))
            .collect(),
    )
    .await;
    relay.wait_for_line("broker unavailable", LONG).await;
    let rss_small = rss_kib(relay.pid());

    // A big backlog must not grow the relay: it holds one batch at most.
    sqlx::query(&format!(
        "INSERT INTO {}.outbox (topic, event, key, payload)
         SELECT $1, 'test.event', 'bulk' || (g % 7), jsonb_build_object('key', 'bulk' || (g % 7), 'seq', g, 'pad', repeat('x', 500))
           FROM generate_series(1, 20000) g",
        ctx.schema
    ))
    .bind(&ctx.queue)
    .execute(&ctx.pool)
    .await
    .unwrap();
    let marker = relay.output().matches("broker unavailable").count();
    wait_until(LONG, "more failed attempts with the big backlog", || {
        let n = relay.output().matches("broker unavailable").count();
        async move { n >= marker + 3 }
    })
    .await;
    let rss_big = rss_kib(relay.pid());
    assert!(
        rss_big < rss_small + 20 * 1024,
        "relay memory grew with the backlog: {rss_small} KiB -> {rss_big} KiB"
    );

    let attempts: i64 = sqlx::query_scalar(&format!(
        "SELECT coalesce(max(attempts), 0)::bigint FROM {}.outbox",
        ctx.schema
    ))
    .fetch_one(&ctx.pool)
    .await
    .unwrap();
    assert_eq!(attempts, 0, "a transient outage must not consume attempts");
    assert!(ctx.dead_letters().await.is_empty());
    assert_eq!(ctx.unsent().await, 50 + 20000);

    redis.restart().await;
    wait_until(
        Duration::from_secs(120),
        "backlog delivered after Redis returns",
        || async { ctx.unsent().await == 0 },
    )
    .await;
    let view = RedisView::new(&redis.url(), &ctx.queue).await;
    let ids = view.waiting_ids().await;
    assert_eq!(ids.len(), 100 + 20000);
    assert_eq!(ids.iter().collect::<HashSet<_>>().len(), ids.len());
    let small: Vec<_> = {
        let mut v = Vec::new();
        for id in &ids[..100] {
            let d = view.data(id).await;
            v.push((
                id.clone(),
                d["key"].as_str().unwrap().to_owned(),
                d["seq"].as_u64().unwrap(),
            ));
        }
        v
    };
    assert_per_key_order(&small);
    drop(relay);
    ctx.cleanup().await;
}
