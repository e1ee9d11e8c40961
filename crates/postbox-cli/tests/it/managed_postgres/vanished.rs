//! A server that vanishes without a close: the listener is replaced
//! within the session timeout.

use crate::support::*;
use std::time::Duration;

/// Backends holding armed partitions of `ctx`'s schema, and how many each
/// (a relay worker's session holds `postbox.armed.<schema>` for each
/// partition it sleeps on; outbox_wakeup_arm.sql).
async fn armed(ctx: &Ctx) -> Vec<(i32, i64)> {
    sqlx::query_as(
        "SELECT pid, count(*) FROM pg_locks
          WHERE locktype = 'advisory' AND granted AND objsubid = 2
            AND classid::bigint = (hashtext('postbox.armed.' || $1)::bigint & 4294967295)
          GROUP BY pid",
    )
    .bind(&ctx.schema)
    .fetch_all(&ctx.pool)
    .await
    .unwrap()
}

/// The server a relay talks to vanishes without a close (its host gone, a
/// failover to another address): every session open then goes silent for
/// good, new ones reach a server. The workers give their sessions up within
/// `session_timeout`; the listener's session only reads, so it asks the
/// server a question every `session_timeout / 2` and is replaced within
/// 1.5 × `session_timeout`. The wake-ups then come back: an event produced
/// while every worker sleeps on a 60 s poll interval arrives at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listener_whose_server_vanished_is_replaced_within_the_session_timeout() {
    use std::net::ToSocketAddrs;
    let ctx = Ctx::new("vanish").await;
    let redis = postbox_testkit::redis_url();
    let direct = url::Url::parse(&postbox_testkit::database_url()).unwrap();
    let server = (direct.host_str().unwrap(), direct.port().unwrap_or(5432))
        .to_socket_addrs()
        .unwrap()
        .next()
        .unwrap();
    let proxy = postbox_testkit::Proxy::start(server).await.unwrap();
    let mut through = direct.clone();
    through.set_port(Some(proxy.port())).unwrap();
    let mut args = ctx.relay_args();
    args[1] = through.to_string();
    args.extend(
        [
            "--redis-url",
            &redis,
            "--workers",
            "1",
            "--session-timeout",
            "4s",
            "--poll-interval",
            "60s",
        ]
        .map(String::from),
    );
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let relay = postbox_testkit::RelayProcess::spawn(BIN, &args, &[]);
    relay.wait_for_line("relay started", LONG).await;
    let view = RedisView::new(&redis, &ctx.queue).await;
    ctx.produce(vec![ctx.event("k", 1)]).await;
    wait_until(LONG, "the first event", || async {
        view.wait_len().await == 1
    })
    .await;

    let all = i64::from(postbox::PARTITIONS);
    wait_until(LONG, "the worker asleep, every partition armed", || async {
        armed(&ctx).await.iter().any(|(_, n)| *n == all)
    })
    .await;
    let before: Vec<i32> = armed(&ctx).await.into_iter().map(|(pid, _)| pid).collect();
    proxy.vanish();
    relay
        .wait_for_line(
            "relay listener's session did not answer within session_timeout",
            Duration::from_secs(15),
        )
        .await;
    relay
        .wait_for_line(
            "relay worker lost its database session",
            Duration::from_secs(15),
        )
        .await;
    // Back and asleep: every partition armed again by the new session, so
    // only a wake-up brings the next event before the 60 s poll.
    wait_until(
        LONG,
        "every partition armed again by a new session",
        || async {
            armed(&ctx)
                .await
                .iter()
                .any(|(pid, n)| *n == all && !before.contains(pid))
        },
    )
    .await;
    ctx.produce(vec![ctx.event("k", 2)]).await;
    wait_until(
        Duration::from_secs(10),
        "the event after the server vanished (a wake-up, not the 60 s poll)",
        || async { view.wait_len().await == 2 },
    )
    .await;
    drop(relay);
    ctx.cleanup().await;
}
