//! Table health: a steady load with retention on, and the outbox's size,
//! live and dead rows and unsent count at every report interval — does the
//! table stay bounded?

use super::report::{HealthRow, HealthSection};
use super::{Ctx, NullSink};
use crate::CliError;
use postbox::migrate::WakeUp;
use postbox_relay::{Config, Relay};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

/// Sent rows older than this are deleted by the relay's maintenance.
const RETENTION: Duration = Duration::from_secs(30);

pub async fn run(ctx: &Ctx) -> Result<HealthSection, CliError> {
    let p = &ctx.p;
    let schema = ctx.schema("health", WakeUp::Statement).await?;
    let shutdown = CancellationToken::new();
    let relay = Relay::new(
        Config {
            workers: 2,
            outbox_retention: RETENTION,
            maintenance_interval: Duration::from_secs(5),
            ..ctx.relay_config(&schema, Duration::from_secs(1))
        },
        Arc::new(NullSink),
    )?;
    let task = tokio::spawn(relay.run(shutdown.clone()));
    let outbox = postbox::Outbox::new(schema.as_str())?;
    // Dead rows are reclaimed by autovacuum only: say when the server has it off.
    let autovacuum: String = sqlx::query_scalar("SELECT current_setting('autovacuum')")
        .fetch_one(&ctx.pool)
        .await?;
    println!(
        "Table health: {} events/s for {:?}, outbox retention {RETENTION:?}, NullSink, autovacuum {autovacuum}, {} cores\n",
        p.rate, p.health_duration, ctx.cores
    );
    println!("| elapsed | produced | outbox total size | of which indexes | live rows | dead rows | unsent | autovacuums |");
    println!("|---|---|---|---|---|---|---|---|");
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
                    "health",
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
            let row = HealthRow {
                elapsed_s: started.elapsed().as_secs_f64().round(),
                produced,
                total_bytes,
                index_bytes,
                live_rows,
                dead_rows,
                unsent,
                autovacuums,
            };
            println!(
                "| {:?} | {produced} | {} KiB | {} KiB | {live_rows} | {dead_rows} | {unsent} | {autovacuums} |",
                Duration::from_secs(row.elapsed_s as u64),
                total_bytes / 1024,
                index_bytes / 1024
            );
            rows.push(row);
        }
    }
    shutdown.cancel();
    task.await??;
    ctx.drop_schema(&schema).await?;
    Ok(HealthSection {
        rate: p.rate,
        retention_s: RETENTION.as_secs(),
        autovacuum,
        rows,
    })
}
