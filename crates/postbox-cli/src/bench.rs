//! `postbox bench`: relay drain rate to BullMQ next to the SQL-only
//! claim+mark rate (a sink that acknowledges at once), measured in the same run.

use crate::CliError;
use postbox_bullmq::bullmq::{Queue, QueueOptions};
use postbox_bullmq::{BullmqConfig, BullmqSink};
use postbox_relay::{Config, Delivery, OutboxEvent, Relay, Secret, Sink};
use sqlx::PgPool;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

#[derive(clap::Args)]
pub struct Args {
    /// PostgreSQL URL.
    #[arg(
        long,
        env = "DATABASE_URL",
        hide_env_values = true,
        default_value = "postgres://postgres:postgres@127.0.0.1:5432/postgres"
    )]
    database_url: String,
    /// Redis URL.
    #[arg(
        long,
        env = "REDIS_URL",
        hide_env_values = true,
        default_value = "redis://127.0.0.1:6379"
    )]
    redis_url: String,
    /// Events pre-filled per run.
    #[arg(long, default_value_t = 100_000)]
    events: i64,
    /// Ordering keys the events are spread over.
    #[arg(long, default_value_t = 64)]
    keys: i64,
    /// Relay batch size.
    #[arg(long, default_value_t = 1000)]
    batch_size: i64,
    /// Relay workers.
    #[arg(long, default_value_t = 4)]
    workers: usize,
    /// Repetitions of each measurement.
    #[arg(long, default_value_t = 3)]
    reps: usize,
    /// Instead of the drain benchmark: produce at --rate events/s for this
    /// long with retention on, and report the outbox's size and dead tuples
    /// every minute (table health). E.g. 10m.
    #[arg(long, value_parser = |s: &str| humantime_serde::re::humantime::parse_duration(s).map_err(|e| e.to_string()))]
    table_health: Option<Duration>,
    /// Events per second for --table-health.
    #[arg(long, default_value_t = 1000)]
    rate: u64,
}

/// Acknowledges everything at once: what is left is PostgreSQL and the relay.
struct NullSink;

#[async_trait::async_trait]
impl Sink for NullSink {
    fn name(&self) -> &'static str {
        "null"
    }
    async fn publish(&self, batch: &[OutboxEvent]) -> Vec<Delivery> {
        batch.iter().map(|_| Delivery::Delivered).collect()
    }
}

pub async fn run(a: Args) -> Result<(), CliError> {
    if let Some(d) = a.table_health {
        return table_health(&a, d).await;
    }
    let pool = PgPool::connect(&a.database_url).await.map_err(|e| {
        format!(
            "cannot connect to PostgreSQL at {}: {e}",
            Secret::new(a.database_url.clone())
        )
    })?;
    let mut sql_only = Vec::new();
    let mut bullmq = Vec::new();
    println!(
        "postbox bench: {} events over {} keys, batch {}, {} workers, {} cores",
        a.events,
        a.keys,
        a.batch_size,
        a.workers,
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    for rep in 0..a.reps {
        let r = drain(&a, &pool, Arc::new(NullSink)).await?;
        println!("  rep {}: sql-only claim+mark {:>9.0} events/s", rep + 1, r);
        sql_only.push(r);
        let queue = format!("postbox-bench-{}-{rep}", std::process::id());
        let sink = Arc::new(BullmqSink::new(BullmqConfig {
            redis_url: Secret::new(a.redis_url.clone()),
            ..Default::default()
        })?);
        let r = drain_to(&a, &pool, sink, &queue).await?;
        println!("  rep {}: relay → BullMQ     {:>9.0} events/s", rep + 1, r);
        bullmq.push(r);
        let q = Queue::with_options(
            &queue,
            QueueOptions {
                connection: postbox_bullmq::bullmq::options::RedisConnectionOptions {
                    url: a.redis_url.clone(),
                    ..Default::default()
                },
                ..Default::default()
            },
        )
        .await?;
        // Free Redis memory for the next repetition.
        while q.obliterate(true, 5000).await.is_err() {}
    }
    let (s, b) = (summary(&sql_only), summary(&bullmq));
    println!();
    println!("| measurement | events/s median | min | max | ratio to sql-only |");
    println!("|---|---|---|---|---|");
    println!(
        "| SQL-only claim+mark (baseline) | {:.0} | {:.0} | {:.0} | 1.00 |",
        s.0, s.1, s.2
    );
    println!(
        "| relay → BullMQ | {:.0} | {:.0} | {:.0} | {:.2} |",
        b.0,
        b.1,
        b.2,
        b.0 / s.0
    );
    Ok(())
}

fn summary(v: &[f64]) -> (f64, f64, f64) {
    let mut v = v.to_vec();
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    (v[v.len() / 2], v[0], v[v.len() - 1])
}

async fn drain(a: &Args, pool: &PgPool, sink: Arc<dyn Sink>) -> Result<f64, CliError> {
    drain_to(a, pool, sink, "bench").await
}

/// Pre-fill a fresh schema, start a relay, time until every row is published.
async fn drain_to(
    a: &Args,
    pool: &PgPool,
    sink: Arc<dyn Sink>,
    topic: &str,
) -> Result<f64, CliError> {
    let schema = postbox::SchemaName::new(&format!("postbox_bench_{}", std::process::id()))?;
    sqlx::raw_sql(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE"))
        .execute(pool)
        .await?;
    let mut conn = pool.acquire().await?;
    postbox::migrate::run(&mut conn, &schema, postbox::migrate::Notify::Off).await?;
    sqlx::query(&format!(
        "INSERT INTO {schema}.outbox (topic, event, key, payload)
         SELECT $1, 'bench.event', 'key-' || (g % $2), jsonb_build_object('n', g, 'body', 'hello from the bench')
           FROM generate_series(1, $3) g"
    ))
    .bind(topic)
    .bind(a.keys)
    .bind(a.events)
    .execute(&mut *conn)
    .await?;
    sqlx::raw_sql(&format!("VACUUM ANALYZE {schema}.outbox"))
        .execute(&mut *conn)
        .await?;
    drop(conn);

    let shutdown = CancellationToken::new();
    let relay = Relay::new(
        Config {
            database_url: Secret::new(a.database_url.clone()),
            schemas: vec![schema.to_string()],
            workers: a.workers,
            batch_size: a.batch_size,
            poll_interval: Duration::from_millis(50),
            ..Default::default()
        },
        sink,
    )?;
    let stats = relay.stats();
    let started = Instant::now();
    let task = tokio::spawn(relay.run(shutdown.clone()));
    while stats.snapshot().published < a.events as u64 {
        if task.is_finished() {
            return Err("relay stopped during the benchmark".into());
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let rate = a.events as f64 / started.elapsed().as_secs_f64();
    shutdown.cancel();
    task.await??;
    sqlx::raw_sql(&format!("DROP SCHEMA {schema} CASCADE"))
        .execute(pool)
        .await?;
    Ok(rate)
}

/// Sustained load with retention on: does the outbox stay bounded?
async fn table_health(a: &Args, duration: Duration) -> Result<(), CliError> {
    let pool = PgPool::connect(&a.database_url).await.map_err(|e| {
        format!(
            "cannot connect to PostgreSQL at {}: {e}",
            Secret::new(a.database_url.clone())
        )
    })?;
    let schema = postbox::SchemaName::new(&format!("postbox_health_{}", std::process::id()))?;
    let mut conn = pool.acquire().await?;
    postbox::migrate::run(&mut conn, &schema, Default::default()).await?;
    drop(conn);
    let shutdown = CancellationToken::new();
    let relay = Relay::new(
        Config {
            database_url: Secret::new(a.database_url.clone()),
            schemas: vec![schema.to_string()],
            workers: 2,
            outbox_retention: Duration::from_secs(30),
            maintenance_interval: Duration::from_secs(5),
            ..Default::default()
        },
        Arc::new(NullSink),
    )?;
    let task = tokio::spawn(relay.run(shutdown.clone()));
    let outbox = postbox::Outbox::new(schema.as_str())?;
    println!(
        "table health: {} events/s for {duration:?}, outbox retention 30 s, NullSink, {} cores",
        a.rate,
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    println!("| minute | produced | outbox total size | of which indexes | live rows | dead rows | unsent |");
    println!("|---|---|---|---|---|---|---|");
    let started = Instant::now();
    let tick = Duration::from_millis(100);
    let per_tick = (a.rate / 10).max(1) as usize;
    let mut next = Instant::now();
    let mut next_report = started + Duration::from_secs(60);
    let mut produced = 0u64;
    let mut minute = 0;
    while started.elapsed() < duration {
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
        let mut tx = pool.begin().await?;
        outbox.enqueue_many(&mut tx, events).await?;
        tx.commit().await?;
        produced += per_tick as u64;
        if Instant::now() >= next_report {
            next_report += Duration::from_secs(60);
            minute += 1;
            let (total, indexes, live, dead): (i64, i64, i64, i64) = sqlx::query_as(
                "SELECT pg_total_relation_size(c.oid), pg_indexes_size(c.oid), s.n_live_tup, s.n_dead_tup
                   FROM pg_class c JOIN pg_stat_user_tables s ON s.relid = c.oid
                  WHERE s.schemaname = $1 AND s.relname = 'outbox'",
            )
            .bind(schema.as_str())
            .fetch_one(&pool)
            .await?;
            let unsent: i64 = sqlx::query_scalar(&format!(
                "SELECT count(*) FROM {schema}.outbox WHERE sent_at IS NULL"
            ))
            .fetch_one(&pool)
            .await?;
            println!(
                "| {minute} | {produced} | {} KiB | {} KiB | {live} | {dead} | {unsent} |",
                total / 1024,
                indexes / 1024
            );
        }
    }
    shutdown.cancel();
    task.await??;
    sqlx::raw_sql(&format!("DROP SCHEMA {schema} CASCADE"))
        .execute(&pool)
        .await?;
    Ok(())
}
