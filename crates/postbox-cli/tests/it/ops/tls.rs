//! The relay over TLS, to PostgreSQL and to Redis.

use crate::support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relay_talks_tls_to_postgresql() {
    let ctx = Ctx::new("tls").await;
    let ssl: String = sqlx::query_scalar("SHOW ssl")
        .fetch_one(&ctx.pool)
        .await
        .unwrap();
    assert_eq!(
        ssl, "on",
        "this test needs a PostgreSQL with ssl = on (Debian's default cluster has it)"
    );
    let url = {
        let base = postbox_testkit::database_url();
        format!(
            "{base}{}sslmode=require",
            if base.contains('?') { '&' } else { '?' }
        )
    };
    let redis = postbox_testkit::redis_url();
    let relay = RelayProcess::spawn(
        BIN,
        &[
            "--database-url",
            &url,
            "--schemas",
            &ctx.schema,
            "--redis-url",
            &redis,
        ],
        &[],
    );
    ctx.produce(vec![ctx.event("k", 1)]).await;
    wait_until(LONG, "delivered over TLS", || async {
        ctx.unsent().await == 0
    })
    .await;
    let encrypted: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM pg_stat_ssl s JOIN pg_stat_activity a USING (pid) WHERE s.ssl AND a.application_name LIKE $1",
    )
    .bind(format!("postbox-relay:{}:%", relay.pid()))
    .fetch_one(&ctx.pool)
    .await
    .unwrap();
    assert!(encrypted >= 1, "the relay's sessions are not encrypted");
    // verify-full checks the server's name against a CA: a CA that does not sign it is refused, clearly.
    let bad = format!("{url}&sslmode=verify-full&sslrootcert=/nonexistent/ca.pem")
        .replace("sslmode=require&", "");
    let out = std::process::Command::new(BIN)
        .args(["relay", "--database-url", &bad, "--schemas", &ctx.schema])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("cannot connect to PostgreSQL"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    drop(relay);
    ctx.cleanup().await;
}

/// `rediss://`: the relay publishes to a Redis that speaks TLS only. (The
/// pinned `bullmq` crate trusts the public web roots; a self-signed test
/// certificate needs `#insecure`, a private CA cannot be configured — docs/src/operations/security.md.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relay_publishes_over_redis_tls() {
    let ctx = Ctx::new("redistls").await;
    let redis = RedisServer::start_tls().await;
    assert!(redis.url().starts_with("rediss://"));
    ctx.produce((1..=5).map(|i| ctx.event("k", i)).collect())
        .await;
    let relay = ctx.relay(&redis.url(), &[], &[]);
    wait_until(LONG, "rows delivered over TLS", || async {
        ctx.unsent().await == 0
    })
    .await;
    let view = RedisView::new(&redis.url(), &ctx.queue).await;
    let seen = view.waiting().await;
    assert_eq!(
        seen.iter().map(|s| s.2).collect::<Vec<_>>(),
        vec![1, 2, 3, 4, 5]
    );
    // The server has no plain-text port: a redis:// client gets nowhere.
    assert!(!postbox_testkit::ping(&format!("redis://127.0.0.1:{}", redis.port())).await);
    drop(relay);
    ctx.cleanup().await;
}
