//! PostgreSQL behind a pooler in transaction mode (Debian's PgBouncer, as
//! most hosted PostgreSQL serves its default URL): producers (Rust and
//! Node), the inbox consumer and its dead-letter replay, and the command
//! line work through it; a relay refuses it, and a read-only server, with a
//! message that names the cause and the fix. Also the server's timeouts a
//! hosted database sets, and a server that vanishes without a close.

use crate::dlq::cli;
use crate::node_package::node_cmd;
use crate::support::*;
use postbox::{BoxError, Handler, Message, RetryPolicy};
use postbox_testkit::PgBouncer;
use sqlx::Connection;
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// A pooler whose every server session already holds a named prepared
/// statement `sqlx_s_1` of another client, as a busy pooler's sessions do:
/// a client that names its statements as sqlx does by default fails on
/// any of them ("prepared statement \"sqlx_s_1\" already exists").
async fn busy_pooler() -> PgBouncer {
    let bouncer = PgBouncer::start(&[]).await;
    // Four clients in a transaction at once hold the pool's four sessions.
    let mut clients = Vec::new();
    for _ in 0..4 {
        let mut c = sqlx::PgConnection::connect(&bouncer.url()).await.unwrap();
        sqlx::raw_sql("BEGIN").execute(&mut c).await.unwrap();
        sqlx::query("SELECT 1").execute(&mut c).await.unwrap();
        clients.push(c);
    }
    for mut c in clients {
        sqlx::raw_sql("COMMIT").execute(&mut c).await.unwrap();
    }
    bouncer
}

/// Records each message's seq in `effects`, with the library's unnamed
/// statements (a handler's own statements through a pooler must not be
/// named either); seq 3 fails while `broken`.
struct Effects {
    insert: String,
    broken: AtomicBool,
}

impl Handler for Effects {
    async fn handle(&self, tx: &mut sqlx::PgConnection, msg: &Message) -> Result<(), BoxError> {
        let v: serde_json::Value = msg.json()?;
        let seq = v["seq"].as_i64().ok_or("no seq")?;
        postbox::sql::statement(&self.insert)
            .bind(seq)
            .execute(&mut *tx)
            .await?;
        if seq == 3 && self.broken.load(SeqCst) {
            return Err("cannot parse the order (bug 42)".into());
        }
        Ok(())
    }
}

async fn count(ctx: &Ctx, sql: &str) -> i64 {
    sqlx::query_scalar(&sql.replace("{schema}", &ctx.schema))
        .fetch_one(&ctx.pool)
        .await
        .unwrap()
}

/// `postbox <args> --database-url <url> --schema <schema> <rest>`, which must succeed.
async fn postbox(url: &str, ctx: &Ctx, args: &[&str], rest: &[&str]) -> String {
    let mut all = args.to_vec();
    all.extend(["--database-url", url, "--schema", &ctx.schema]);
    all.extend_from_slice(rest);
    let (ok, out, err) = cli(&all).await;
    assert!(ok, "postbox {all:?} through the pooler failed:\n{out}{err}");
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn producers_consumers_and_the_command_line_work_through_a_transaction_pooler() {
    let ctx = Ctx::new("pooled").await;
    let bouncer = busy_pooler().await;
    let url = bouncer.url();

    // Producers: eight connections share the pool's four server sessions.
    let mut producers = tokio::task::JoinSet::new();
    for c in 0..8 {
        let outbox = ctx.outbox.clone().statements(postbox::Statements::Unnamed);
        let (url, queue) = (url.clone(), ctx.queue.clone());
        producers.spawn(async move {
            let mut conn = sqlx::PgConnection::connect(&url).await.unwrap();
            for i in 0..10 {
                let key = format!("k{c}");
                let mut tx = conn.begin().await.unwrap();
                outbox
                    .enqueue(&mut tx, event(&queue, &key, i * 3))
                    .await
                    .expect("enqueue through the pooler");
                outbox
                    .enqueue_many(
                        &mut tx,
                        vec![
                            event(&queue, &key, i * 3 + 1),
                            event(&queue, &key, i * 3 + 2),
                        ],
                    )
                    .await
                    .expect("enqueue_many through the pooler");
                tx.commit().await.unwrap();
            }
        });
    }
    while let Some(done) = producers.join_next().await {
        done.unwrap();
    }
    assert_eq!(
        count(&ctx, "SELECT count(*) FROM {schema}.outbox").await,
        240
    );
    let node = node_cmd(&[
        "test/interop/produce.mjs",
        &ctx.schema,
        &ctx.queue,
        "1000",
        "20",
        "4",
    ])
    .env("DATABASE_URL", &url)
    .output()
    .await
    .expect("run node");
    assert!(
        node.status.success(),
        "the Node package through the pooler: {}",
        String::from_utf8_lossy(&node.stderr)
    );
    assert_eq!(
        count(&ctx, "SELECT count(*) FROM {schema}.outbox").await,
        260
    );

    // The inbox consumer: each message applied once though delivered twice,
    // seq 3 a dead letter, all through the pooler.
    sqlx::raw_sql(&format!(
        "CREATE TABLE {}.effects (seq bigint NOT NULL)",
        ctx.schema
    ))
    .execute(&ctx.pool)
    .await
    .unwrap();
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(6)
        .connect(&url)
        .await
        .unwrap();
    let consumer = Arc::new(
        postbox::InboxConsumer::new(
            pool,
            postbox::Inbox::new(&ctx.schema)
                .unwrap()
                .statements(postbox::Statements::Unnamed),
            "pooled",
        )
        .retry(RetryPolicy {
            attempts: 2,
            backoff_min: Duration::from_millis(10),
            backoff_max: Duration::from_millis(20),
        })
        .replay_poll(Duration::from_millis(100)),
    );
    let handler = Arc::new(Effects {
        insert: format!("INSERT INTO {}.effects (seq) VALUES ($1)", ctx.schema),
        broken: AtomicBool::new(true),
    });
    let shutdown = CancellationToken::new();
    let mut deliveries = tokio::task::JoinSet::new();
    for seq in (1..=12).chain(1..=12) {
        let (consumer, handler, shutdown) = (consumer.clone(), handler.clone(), shutdown.clone());
        let mut msg = Message::new(format!("m{seq}"), "orders");
        msg.payload = serde_json::to_vec(&serde_json::json!({ "seq": seq })).unwrap();
        deliveries.spawn(async move {
            consumer
                .process(&msg, &*handler, &shutdown)
                .await
                .expect("processed through the pooler");
        });
    }
    while let Some(done) = deliveries.join_next().await {
        done.unwrap();
    }
    assert_eq!(
        count(&ctx, "SELECT count(*) FROM {schema}.effects").await,
        11
    );
    assert_eq!(
        count(&ctx, "SELECT count(*) FROM {schema}.inbox_dead_letter").await,
        1
    );

    // The command line through the pooler.
    let status = {
        let (ok, out, err) =
            cli(&["status", "--database-url", &url, "--schemas", &ctx.schema]).await;
        assert!(ok, "postbox status through the pooler failed:\n{out}{err}");
        out
    };
    assert!(status.contains("260"), "{status}");
    let listed = postbox(&url, &ctx, &["inbox-dlq", "list"], &[]).await;
    assert!(listed.contains("bug 42"), "{listed}");
    let none = postbox(&url, &ctx, &["dlq", "list"], &[]).await;
    assert!(none.contains("no dead letters"), "{none}");
    postbox(&url, &ctx, &["dlq", "purge"], &["--all", "--yes"]).await;

    // Fixed, replayed through the pooler: applied once, the dead letter gone.
    handler.broken.store(false, SeqCst);
    let asked = postbox(&url, &ctx, &["inbox-dlq", "replay"], &["--all", "--yes"]).await;
    assert!(asked.contains("asked for a replay of 1"), "{asked}");
    let replays = {
        let (consumer, handler, shutdown) = (consumer.clone(), handler.clone(), shutdown.clone());
        tokio::spawn(async move { consumer.serve_replays(&*handler, &shutdown).await })
    };
    wait_until(LONG, "the replayed message applied", || async {
        count(&ctx, "SELECT count(*) FROM {schema}.effects").await == 12
    })
    .await;
    shutdown.cancel();
    replays.await.unwrap();
    assert_eq!(
        count(&ctx, "SELECT count(*) FROM {schema}.inbox_dead_letter").await,
        0
    );

    // A schema migrated through the pooler, from scratch and again.
    let fresh = format!("{}_m", ctx.schema);
    for _ in 0..2 {
        let (ok, out, err) = cli(&["migrate", "--database-url", &url, "--schema", &fresh]).await;
        assert!(ok, "postbox migrate through the pooler failed:\n{out}{err}");
    }
    postbox_testkit::drop_schema(&ctx.pool, &fresh).await;

    // A role granted through the pooler.
    let role = format!("r{}_pooled", postbox_testkit::suffix());
    sqlx::raw_sql(&format!("CREATE ROLE {role}"))
        .execute(&ctx.pool)
        .await
        .unwrap();
    let granted = postbox(
        &url,
        &ctx,
        &["grant"],
        &["--role", &role, "--as", "producer"],
    )
    .await;
    assert!(granted.contains("granted"), "{granted}");
    drop(bouncer);
    ctx.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relay_refuses_a_transaction_pooler_and_a_read_only_server_and_says_what_to_do() {
    let ctx = Ctx::new("pooled_relay").await;
    let bouncer = busy_pooler().await;
    let relay = |url: String| {
        let schema = ctx.schema.clone();
        async move {
            let out = tokio::time::timeout(
                LONG,
                tokio::process::Command::new(BIN)
                    .args(["relay", "--database-url", &url, "--schemas", &schema])
                    .args(["--redis-url", &postbox_testkit::redis_url()])
                    .env_remove("DATABASE_URL")
                    .kill_on_drop(true)
                    .output(),
            )
            .await
            .expect("the relay exits at once")
            .unwrap();
            assert!(!out.status.success(), "the relay must refuse");
            String::from_utf8_lossy(&out.stderr).into_owned()
        }
    };
    let pooled = relay(bouncer.url()).await;
    assert!(
        pooled.contains("connection pooler in transaction mode")
            && pooled.contains("pool_mode = session")
            && pooled.contains("producers and consumers may keep the pooled URL"),
        "{pooled}"
    );
    assert!(!pooled.contains("sqlx_s_1"), "{pooled}");

    let read_only = format!(
        "{}?options=-c%20default_transaction_read_only%3Don",
        postbox_testkit::database_url()
    );
    let refused = relay(read_only).await;
    assert!(
        refused.contains("read-only (default_transaction_read_only is on)")
            && refused.contains("the primary's URL"),
        "{refused}"
    );
    ctx.cleanup().await;
}

/// The timeouts hosted databases set for their applications, on a cluster
/// of the test's own, while the broker answers slowly: the relay's claim
/// transaction stays open while a batch is published (4 s here, against an
/// `idle_in_transaction_session_timeout` of 300 ms), and its statements give
/// the server's `statement_timeout` and `lock_timeout` way to its own
/// `session_timeout`. Every event arrives once, in order, and no session is
/// lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relay_works_under_a_hosted_databases_timeouts_while_the_broker_is_slow() {
    let pg = postbox_testkit::PgCluster::start_with(
        "statement_timeout = '2s'\nidle_in_transaction_session_timeout = '300ms'\nlock_timeout = '100ms'\n",
    )
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    let url = pg.url();
    let schema = postbox_testkit::unique_schema("timeouts");
    let name = postbox::SchemaName::new(&schema).unwrap();
    let mut conn = sqlx::PgConnection::connect(&url).await.unwrap();
    postbox::migrate::run(&mut conn, &name, Default::default())
        .await
        .unwrap();
    const N: usize = 40;
    let outbox = postbox::Outbox::new(&schema).unwrap();
    let mut tx = conn.begin().await.unwrap();
    for seq in 1..=N {
        outbox
            .enqueue(&mut tx, event("hooks", "k", seq))
            .await
            .unwrap();
    }
    tx.commit().await.unwrap();
    let rx = postbox_testkit::WebhookReceiver::start(crate::webhook::SECRET, None).await;
    let hook = format!("http://127.0.0.1:{}/slow/{{topic}}/{{key}}", rx.port);
    let relay = RelayProcess::spawn(
        BIN,
        &[
            "--database-url",
            &url,
            "--schemas",
            &schema,
            "--sink",
            "webhook",
            "--webhook-url",
            &hook,
            "--webhook-secrets",
            crate::webhook::SECRET,
            "--publish-timeout",
            "20s",
        ],
        &[],
    );
    drop(conn);
    let pool = sqlx::PgPool::connect(&url).await.unwrap();
    let unsent = format!("SELECT count(*) FROM {schema}.outbox WHERE sent_at IS NULL");
    wait_until(LONG, "every event delivered", || async {
        sqlx::query_scalar::<_, i64>(&unsent)
            .fetch_one(&pool)
            .await
            .unwrap()
            == 0
    })
    .await;
    let seqs: Vec<i64> = rx
        .seen("slow")
        .iter()
        .map(|r| {
            let body: serde_json::Value =
                serde_json::from_str(r["body"].as_str().unwrap()).unwrap();
            body["seq"].as_i64().unwrap()
        })
        .collect();
    assert_eq!(
        seqs,
        (1..=N as i64).collect::<Vec<_>>(),
        "once each, in order"
    );
    let log = relay.output();
    assert!(
        !log.contains("lost its database session")
            && !log.contains("due to statement timeout")
            && !log.contains("idle-in-transaction"),
        "{log}"
    );
}

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

/// A pooler switched to transaction mode while a relay runs through it (the
/// relay started through it in session mode, which it accepts): the worker's
/// next statement lands on another server session, where its prepared
/// statement is missing (or its backend pid differs), and the relay stops
/// with the pooler named, rather than retry for good on sessions that are
/// not its own; the rows stay, and a relay on a direct URL delivers them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relay_whose_session_moves_under_it_stops_and_loses_nothing() {
    let ctx = Ctx::new("moved").await;
    let redis = postbox_testkit::redis_url();
    let mut pooler = PgBouncer::start_session(&[]).await;
    let mut args = ctx.relay_args();
    args[1] = pooler.url();
    args.extend(["--redis-url", &redis, "--workers", "1"].map(String::from));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut relay = postbox_testkit::RelayProcess::spawn(BIN, &args, &[]);
    relay.wait_for_line("relay started", LONG).await;
    let view = RedisView::new(&redis, &ctx.queue).await;
    ctx.produce(vec![ctx.event("k", 1)]).await;
    wait_until(LONG, "the first event, in session mode", || async {
        view.wait_len().await == 1
    })
    .await;

    // Server sessions other clients left idle in the pool, as on any busy
    // pooler: in transaction mode the worker's next transaction may get one.
    for _ in 0..3 {
        let mut c = sqlx::PgConnection::connect(&pooler.url()).await.unwrap();
        sqlx::query("SELECT 1").execute(&mut c).await.unwrap();
        c.close().await.unwrap();
    }
    pooler.pool_mode("transaction");
    ctx.produce((2..=5).map(|n| ctx.event("k", n)).collect())
        .await;
    let code = relay.wait(Duration::from_secs(30)).await;
    assert!(
        code.is_some_and(|c| c != 0),
        "the relay went on through a transaction pooler (exit {code:?}):\n{}\n{}",
        relay.output(),
        pooler.log()
    );
    assert!(
        relay
            .output()
            .contains("connection pooler in transaction mode"),
        "{}",
        relay.output()
    );
    // The pooler's server sessions keep the stopped relay's partition locks
    // until the server ends them (idle for session_timeout); a pooler taken
    // down closes them at once.
    pooler.kill();
    let direct = ctx.relay(&redis, &[], &[]);
    wait_until(LONG, "every event, by a relay on a direct URL", || async {
        ctx.unsent().await == 0
    })
    .await;
    assert_per_key_order(&view.waiting().await);
    assert_eq!(view.wait_len().await, 5);
    drop(direct);
    ctx.cleanup().await;
}
