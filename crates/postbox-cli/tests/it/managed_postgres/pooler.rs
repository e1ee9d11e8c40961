//! Through a transaction pooler: producers (Rust and Node), the inbox
//! consumer, its dead-letter replay and the command line work; a relay
//! refuses it (and a read-only server), and stops when its session moves
//! under it.

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
    // A replay of the events, sent as a relay leaves them, three chunks in
    // three transactions.
    sqlx::query(&format!("UPDATE {}.outbox SET sent_at = now()", ctx.schema))
        .execute(&ctx.pool)
        .await
        .unwrap();
    let replayed = postbox(
        &url,
        &ctx,
        &["replay"],
        &["--since", "1h", "--chunk", "100", "--rate", "0", "--yes"],
    )
    .await;
    assert!(replayed.contains("replayed 260 event(s)"), "{replayed}");
    assert_eq!(
        count(
            &ctx,
            "SELECT count(*) FROM {schema}.outbox WHERE sent_at IS NULL"
        )
        .await,
        260
    );

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
