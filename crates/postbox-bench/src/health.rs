//! Table and Redis health: a steady load through the relay to BullMQ, with a
//! consumer completing every job through its inbox, the outbox's retention on
//! and BullMQ's `keep_completed`; at every report interval the outbox's size,
//! live and dead rows and unsent count, and Redis's memory and the completed
//! jobs it keeps — do both stay bounded?

use super::report::{HealthRow, HealthSection};
use super::{Ctx, InboxOnly};
use crate::BenchError;
use postbox::migrate::WakeUp;
use postbox_bullmq::{inbox_worker, BullmqConfig, BullmqSink};
use postbox_redis_streams::redis::{self, aio::MultiplexedConnection};
use postbox_relay::{Config, Delivery, Relay, Secret};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

/// Sent rows older than this are deleted by the relay's maintenance; completed
/// jobs older than this leave Redis (`bullmq.keep_completed`).
const RETENTION: Duration = Duration::from_secs(30);
/// The consumer's jobs in hand (its pool has two sessions more).
const CONSUMER_CONCURRENCY: usize = 8;

pub async fn run(ctx: &Ctx) -> Result<HealthSection, BenchError> {
    let p = &ctx.p;
    let schema = ctx.schema("health", WakeUp::Statement).await?;
    let queue = ctx.queue_name("health");
    let shutdown = CancellationToken::new();
    let sink = BullmqSink::new(BullmqConfig {
        redis_url: Secret::new(p.redis_url.clone()),
        keep_completed: RETENTION,
        ..Default::default()
    })?;
    let relay = Relay::new(
        Config {
            workers: 2,
            outbox_retention: RETENTION,
            maintenance_interval: Duration::from_secs(5),
            ..ctx.relay_config(&schema, Duration::from_secs(1))
        },
        Arc::new(Delivery::new(sink)),
    )?;
    let task = tokio::spawn(relay.run(shutdown.clone()));
    let consumer_pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(CONSUMER_CONCURRENCY as u32 + 2)
        .connect(&p.database_url)
        .await?;
    let consumer = inbox_worker(
        postbox::InboxConsumer::new(
            consumer_pool.clone(),
            postbox::Inbox::new(schema.as_str())?,
            "health",
        ),
        &queue,
        InboxOnly(|_: &postbox::Message| {}),
        ctx.worker_options(CONSUMER_CONCURRENCY),
        shutdown.clone(),
    )
    .await?
    .close_timeout(Duration::from_millis(500));
    let consumer = tokio::spawn(consumer.run());
    let mut redis = redis::Client::open(p.redis_url.as_str())
        .map_err(|e| format!("bench health: Redis URL: {e}"))?
        .get_multiplexed_async_connection()
        .await
        .map_err(|e| format!("bench health: cannot reach Redis: {e}"))?;
    let outbox = postbox::Outbox::new(schema.as_str())?;
    // Dead rows are reclaimed by autovacuum only: say when the server has it off.
    let autovacuum: String = sqlx::query_scalar("SELECT current_setting('autovacuum')")
        .fetch_one(&ctx.pool)
        .await?;
    println!(
        "Table and Redis health: {} events/s for {:?}, relay → BullMQ → a consumer through its inbox, \
         outbox retention and keep_completed {RETENTION:?}, autovacuum {autovacuum}, {} cores\n",
        p.rate, p.health_duration, ctx.cores
    );
    println!("| elapsed | produced | outbox total size | of which indexes | live rows | dead rows | unsent | autovacuums | Redis used memory | completed jobs kept |");
    println!("|---|---|---|---|---|---|---|---|---|---|");
    let started = Instant::now();
    let tick = Duration::from_millis(100);
    let per_tick = (p.rate / 10).max(1) as usize;
    let mut next = Instant::now();
    let mut next_report = started + p.health_every;
    let mut produced = 0u64;
    let mut rows = Vec::new();
    while started.elapsed() < p.health_duration {
        tokio::time::sleep_until(next.into()).await;
        next += tick;
        let events: Vec<postbox::Event> = (0..per_tick)
            .map(|i| {
                postbox::Event::new(
                    queue.as_str(),
                    "bench.event",
                    serde_json::json!({"n": produced + i as u64}),
                )
                .key(format!("k{}", (produced as usize + i) % 64))
            })
            .collect();
        let mut tx = ctx.pool.begin().await?;
        outbox.enqueue_many(&mut tx, events).await?;
        tx.commit().await?;
        produced += per_tick as u64;
        if Instant::now() >= next_report {
            next_report += p.health_every;
            let (total_bytes, index_bytes, live_rows, dead_rows, autovacuums): (i64, i64, i64, i64, i64) =
                sqlx::query_as(
                    "SELECT pg_total_relation_size(c.oid), pg_indexes_size(c.oid), s.n_live_tup, s.n_dead_tup,
                            s.autovacuum_count
                       FROM pg_class c JOIN pg_stat_user_tables s ON s.relid = c.oid
                      WHERE s.schemaname = $1 AND s.relname = 'outbox'",
                )
                .bind(schema.as_str())
                .fetch_one(&ctx.pool)
                .await?;
            let unsent: i64 = sqlx::query_scalar(&format!(
                "SELECT count(*) FROM {schema}.outbox WHERE sent_at IS NULL"
            ))
            .fetch_one(&ctx.pool)
            .await?;
            let (redis_used_bytes, completed_kept) = redis_health(&mut redis, &queue).await?;
            let row = HealthRow {
                elapsed_s: started.elapsed().as_secs_f64().round(),
                produced,
                total_bytes,
                index_bytes,
                live_rows,
                dead_rows,
                unsent,
                autovacuums,
                redis_used_bytes,
                completed_kept,
            };
            println!(
                "| {:?} | {produced} | {} KiB | {} KiB | {live_rows} | {dead_rows} | {unsent} | {autovacuums} | {} KiB | {completed_kept} |",
                Duration::from_secs(row.elapsed_s as u64),
                total_bytes / 1024,
                index_bytes / 1024,
                redis_used_bytes / 1024,
            );
            rows.push(row);
        }
    }
    shutdown.cancel();
    task.await??;
    consumer.await??;
    consumer_pool.close().await;
    ctx.obliterate(&queue).await?;
    ctx.drop_schema(&schema).await?;
    Ok(HealthSection {
        rate: p.rate,
        retention_s: RETENTION.as_secs(),
        autovacuum,
        rows,
    })
}

/// Redis's `used_memory` (the whole server's) and the completed jobs of
/// `queue` BullMQ keeps.
async fn redis_health(
    redis: &mut MultiplexedConnection,
    queue: &str,
) -> Result<(u64, u64), BenchError> {
    let info: String = redis::cmd("INFO")
        .arg("memory")
        .query_async(redis)
        .await
        .map_err(|e| format!("bench health: INFO memory: {e}"))?;
    let used = info
        .lines()
        .find_map(|l| l.strip_prefix("used_memory:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    let completed: u64 = redis::cmd("ZCARD")
        .arg(format!("bull:{queue}:completed"))
        .query_async(redis)
        .await
        .map_err(|e| format!("bench health: ZCARD: {e}"))?;
    Ok((used, completed))
}
