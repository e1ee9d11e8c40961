//! Prometheus metrics, health and readiness on the admin listener.

use crate::support::*;
use postbox_testkit::http_get;

fn admin_args(port: u16) -> Vec<String> {
    vec![
        "--admin-listen".into(),
        format!("127.0.0.1:{port}"),
        "--stats-interval".into(),
        "200ms".into(),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_and_health_are_served() {
    let ctx = Ctx::new("metrics").await;
    let port = postbox_testkit::free_port();
    let args = admin_args(port);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let relay = ctx.relay(&postbox_testkit::redis_url(), &args, &[]);
    let base = format!("http://127.0.0.1:{port}");
    wait_until(LONG, "/readyz 200", || {
        let u = format!("{base}/readyz");
        async move { matches!(http_get(&u).await, Ok((200, _))) }
    })
    .await;
    assert_eq!(http_get(&format!("{base}/healthz")).await.unwrap().0, 200);
    ctx.produce((1..=10).map(|i| ctx.event("k", i)).collect())
        .await;
    wait_until(LONG, "events relayed", || async { ctx.unsent().await == 0 }).await;
    let published = format!(
        "postbox_events_published_total{{schema=\"{}\",sink=\"bullmq\"}} 10",
        ctx.schema
    );
    wait_until(
        LONG,
        "metrics to show the published events and a refreshed lag gauge",
        || {
            let (u, p, s) = (
                format!("{base}/metrics"),
                published.clone(),
                ctx.schema.clone(),
            );
            async move {
                let body = http_get(&u).await.map(|r| r.1).unwrap_or_default();
                body.contains(&p)
                    && body.contains(&format!("postbox_schema_pending_events{{schema=\"{s}\"}} 0"))
                    // The deprecated name, kept for one release.
                    && body.contains(&format!("postbox_pending_events_total{{schema=\"{s}\"}} 0"))
                    // Keeping up: one of the four workers claims.
                    && body.contains(&format!("postbox_relay_claiming_workers{{schema=\"{s}\"}} 1"))
            }
        },
    )
    .await;
    let body = http_get(&format!("{base}/metrics")).await.unwrap().1;
    for name in [
        "postbox_publish_latency_seconds_bucket",
        "postbox_batch_size_bucket",
        "postbox_batch_duration_seconds_bucket",
    ] {
        assert!(body.contains(name), "{name} missing from /metrics");
    }
    drop(relay);
    ctx.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readyz_flips_when_redis_stops() {
    let ctx = Ctx::new("ready").await;
    let mut redis = RedisServer::start().await;
    let port = postbox_testkit::free_port();
    let args = admin_args(port);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let relay = ctx.relay(&redis.url(), &args, &[]);
    let url = format!("http://127.0.0.1:{port}/readyz");
    let status = |u: String| async move { http_get(&u).await.map(|r| r.0).unwrap_or(0) };
    wait_until(LONG, "ready", || status(url.clone()).map_ready(200)).await;
    redis.kill();
    wait_until(LONG, "not ready while Redis is down", || {
        status(url.clone()).map_ready(503)
    })
    .await;
    let (_, why) = http_get(&url).await.unwrap();
    assert!(why.contains("bullmq unreachable"), "{why}");
    redis.restart().await;
    wait_until(LONG, "ready again", || status(url.clone()).map_ready(200)).await;
    drop(relay);
    ctx.cleanup().await;
}

trait MapReady {
    fn map_ready(self, want: u16) -> impl std::future::Future<Output = bool>;
}

impl<F: std::future::Future<Output = u16>> MapReady for F {
    async fn map_ready(self, want: u16) -> bool {
        self.await == want
    }
}
