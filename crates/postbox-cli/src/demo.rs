//! `postbox demo`: the whole path in one process, with a summary that proves it.
//!
//! Producers write events in transactions (one rolled back), an embedded relay
//! publishes them to BullMQ, an inbox worker consumes them. Then a crash
//! between publish and mark is replayed after BullMQ dropped the completed
//! jobs, so the events really arrive twice and the inbox must skip them.

use crate::CliError;
use postbox::{Event, Inbox, Outbox};
use postbox_bullmq::bullmq::{Queue, QueueOptions, WorkerOptions};
use postbox_bullmq::{inbox_worker, BullmqConfig, BullmqSink};
use postbox_relay::{Config, Delivery, Relay, Secret};
use sqlx::{Connection, PgConnection, PgPool};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    services: crate::services::Services,
    /// Events to produce.
    #[arg(long, default_value_t = 1000)]
    events: usize,
    /// Ordering keys the events are spread over.
    #[arg(long, default_value_t = 16)]
    keys: usize,
    /// Schema for the demo (dropped and recreated).
    #[arg(long, default_value = "postbox_demo")]
    schema: String,
}

struct Deliveries {
    insert: String,
    fresh: AtomicU64,
    duplicates: AtomicU64,
}

impl postbox_bullmq::Handler for Deliveries {
    async fn handle(
        &self,
        tx: &mut PgConnection,
        msg: &postbox_bullmq::Message,
    ) -> Result<(), postbox_bullmq::BoxError> {
        let d: serde_json::Value = msg.json()?;
        sqlx::query(&self.insert)
            .bind(&msg.id)
            .bind(d["key"].as_str())
            .bind(d["seq"].as_i64())
            .execute(tx)
            .await?;
        Ok(())
    }
    async fn after_commit(&self, _msg: &postbox_bullmq::Message) {
        self.fresh.fetch_add(1, Relaxed);
    }
    async fn on_duplicate(&self, _msg: &postbox_bullmq::Message) {
        self.duplicates.fetch_add(1, Relaxed);
    }
}

pub async fn run(a: Args) -> Result<(), CliError> {
    let schema = postbox::SchemaName::new(&a.schema)?;
    let db = Secret::new(a.services.database_url().to_owned());
    let pool = PgPool::connect(a.services.database_url())
        .await
        .map_err(|e| format!("cannot connect to PostgreSQL at {db}: {e}"))?;
    let queue_name = format!("postbox-demo-{}", std::process::id());

    sqlx::raw_sql(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE"))
        .execute(&pool)
        .await?;
    let mut conn = pool.acquire().await?;
    postbox::migrate::run(&mut conn, &schema, Default::default()).await?;
    sqlx::raw_sql(&format!(
        "CREATE TABLE {schema}.postbox_demo_received (n bigint GENERATED ALWAYS AS IDENTITY, event_id uuid PRIMARY KEY, key text, seq bigint)"
    ))
    .execute(&mut *conn)
    .await?;
    drop(conn);
    println!("schema {schema} migrated; queue {queue_name}");

    // The relay, embedded here; `postbox relay` runs the same code as a daemon.
    let shutdown = CancellationToken::new();
    let sink = Arc::new(Delivery::new(BullmqSink::new(BullmqConfig {
        redis_url: Secret::new(a.services.redis_url().to_owned()),
        ..Default::default()
    })?));
    let relay = Relay::new(
        Config {
            database_url: db.clone(),
            schemas: vec![schema.to_string()],
            workers: 2,
            ..Default::default()
        },
        sink,
    )?;
    let stats = relay.stats();
    let relay_task = tokio::spawn(relay.run(shutdown.clone()));

    // The consumer: concurrency 1 so that per-key order is visible end to end.
    let handler = Arc::new(Deliveries {
        insert: format!("INSERT INTO {schema}.postbox_demo_received (event_id, key, seq) VALUES ($1::uuid, $2, $3)"),
        fresh: AtomicU64::new(0),
        duplicates: AtomicU64::new(0),
    });
    let worker = inbox_worker(
        postbox::InboxConsumer::new(pool.clone(), Inbox::new(schema.as_str())?, "demo-consumer"),
        &queue_name,
        handler.clone(),
        WorkerOptions {
            connection: postbox_bullmq::bullmq::options::RedisConnectionOptions {
                url: a.services.redis_url().to_owned(),
                ..Default::default()
            },
            concurrency: 1,
            // Seconds the blocking fetch waits when idle: keeps close() quick.
            drain_delay: 1,
            ..Default::default()
        },
        shutdown.clone(),
    )
    .await
    .map_err(|e| {
        format!(
            "cannot start the BullMQ worker on {}: {e}",
            Secret::new(a.services.redis_url().to_owned())
        )
    })?;
    let worker_task = tokio::spawn(worker.run());

    // Producers: business transactions of up to 10 events; one is rolled back.
    let outbox = Outbox::new(schema.as_str())?;
    let started = Instant::now();
    let mut produced = 0usize;
    let mut seq = vec![0i64; a.keys.max(1)];
    let mut tx_no = 0;
    while produced < a.events {
        let n = (a.events - produced).min(10);
        let mut tx = pool.begin().await?;
        let events: Vec<Event> = (0..n)
            .map(|i| {
                let k = (produced + i) % seq.len();
                seq[k] += 1;
                Event::new(
                    &queue_name,
                    "demo.event",
                    serde_json::json!({"key": format!("key-{k}"), "seq": seq[k]}),
                )
                .key(format!("key-{k}"))
            })
            .collect();
        outbox.enqueue_many(&mut tx, events).await?;
        tx.commit().await?;
        produced += n;
        tx_no += 1;
        if tx_no == 3 {
            let mut tx = pool.begin().await?;
            for i in 0..5 {
                outbox
                    .enqueue(
                        &mut tx,
                        Event::new(
                            &queue_name,
                            "demo.event",
                            serde_json::json!({"key": "rolled-back", "seq": i}),
                        )
                        .key("rolled-back"),
                    )
                    .await?;
            }
            tx.rollback().await?;
        }
    }
    println!("produced {produced} events in {tx_no} transactions (+1 rolled back with 5 events)");

    let received = |pool: PgPool, schema: String| async move {
        sqlx::query_scalar::<_, i64>(&format!(
            "SELECT count(*) FROM {schema}.postbox_demo_received"
        ))
        .fetch_one(&pool)
        .await
        .unwrap_or(-1)
    };
    wait_for(
        Duration::from_secs(120),
        "every event to reach the consumer",
        || {
            let (p, s) = (pool.clone(), schema.to_string());
            async move { received(p, s).await as usize >= produced }
        },
    )
    .await?;
    let elapsed = started.elapsed();
    println!(
        "delivered {} events in {:.2}s ({:.0} events/s end to end)",
        produced,
        elapsed.as_secs_f64(),
        produced as f64 / elapsed.as_secs_f64()
    );

    // Replay: BullMQ has removed 5 completed jobs (removeOnComplete), then a
    // relay crash between publish and mark makes the relay send them again.
    let queue = Queue::with_options(
        &queue_name,
        QueueOptions {
            connection: postbox_bullmq::bullmq::options::RedisConnectionOptions {
                url: a.services.redis_url().to_owned(),
                ..Default::default()
            },
            ..Default::default()
        },
    )
    .await?;
    let replay: Vec<(i64, uuid::Uuid)> = sqlx::query_as(&format!(
        "SELECT id, event_id FROM {schema}.outbox ORDER BY id LIMIT 5"
    ))
    .fetch_all(&pool)
    .await?;
    for (_, event_id) in &replay {
        queue.remove(&event_id.to_string()).await?;
    }
    let ids: Vec<i64> = replay.iter().map(|r| r.0).collect();
    sqlx::query(&format!(
        "UPDATE {schema}.outbox SET sent_at = NULL, xid = pg_current_xact_id() WHERE id = ANY($1)"
    ))
    .bind(&ids)
    .execute(&pool)
    .await?;
    sqlx::query("SELECT pg_notify($1, $2)")
        .bind(postbox::NOTIFY_CHANNEL)
        .bind(schema.as_str())
        .execute(&pool)
        .await?;
    println!(
        "replaying {} events as a relay crash after publish would",
        replay.len()
    );
    let n_replay = replay.len();
    wait_for(
        Duration::from_secs(60),
        "the replayed events to be skipped by the inbox",
        || {
            let h = handler.clone();
            async move { h.duplicates.load(Relaxed) as usize >= n_replay }
        },
    )
    .await?;

    // Judge: every committed event exactly once, none of the rolled-back ones, order per key.
    let lost: i64 = sqlx::query_scalar(&format!(
        "SELECT count(*) FROM {schema}.outbox o WHERE NOT EXISTS (SELECT 1 FROM {schema}.postbox_demo_received r WHERE r.event_id = o.event_id)"
    ))
    .fetch_one(&pool)
    .await?;
    let phantom: i64 = sqlx::query_scalar(&format!(
        "SELECT count(*) FROM {schema}.postbox_demo_received WHERE key = 'rolled-back'"
    ))
    .fetch_one(&pool)
    .await?;
    let reordered: i64 = sqlx::query_scalar(&format!(
        "SELECT count(*) FROM (SELECT seq, lag(seq) OVER (PARTITION BY key ORDER BY n) AS prev FROM {schema}.postbox_demo_received) s WHERE prev IS NOT NULL AND seq <= prev"
    ))
    .fetch_one(&pool)
    .await?;
    let unsent: i64 = sqlx::query_scalar(&format!(
        "SELECT count(*) FROM {schema}.outbox WHERE sent_at IS NULL"
    ))
    .fetch_one(&pool)
    .await?;
    let delivered = handler.fresh.load(Relaxed);
    let duplicates = handler.duplicates.load(Relaxed);
    let s = stats.snapshot();

    shutdown.cancel();
    worker_task.await??;
    relay_task.await??;
    let _ = queue.obliterate(true, 1000).await;
    let mut c = PgConnection::connect(a.services.database_url()).await?;
    let _ = sqlx::raw_sql(&format!("DROP SCHEMA {schema} CASCADE"))
        .execute(&mut c)
        .await;

    println!(
        "relay: {} published in {} batches, {} transient errors",
        s.published, s.batches, s.transient_errors
    );
    println!("rolled-back events delivered: {phantom}; reordered within a key: {reordered}; unsent in outbox: {unsent}");
    println!(
        "produced {produced}, delivered {delivered}, duplicates skipped {duplicates}, lost {lost}"
    );
    if lost != 0 || phantom != 0 || reordered != 0 || delivered as usize != produced {
        return Err("the demo found a delivery problem (see the lines above)".into());
    }
    Ok(())
}

async fn wait_for<F, Fut>(timeout: Duration, what: &str, mut cond: F) -> Result<(), CliError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + timeout;
    while !cond().await {
        if Instant::now() > deadline {
            return Err(format!("timed out after {timeout:?} waiting for {what}").into());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(())
}
