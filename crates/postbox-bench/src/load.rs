//! The whole pipeline under load, as the reference post measured its naive
//! design: producers writing flat out for a fixed window while a relay
//! (→ BullMQ) and an inbox consumer run. Reports what was produced and
//! delivered within the window, the backlog at its end, how long the rest
//! took to arrive, and producer commit → consumer inbox commit latency.
//!
//! Baseline, same run: the same producers with no relay and no consumer.

use super::parts::{bullmq_relay, recording_consumer};
use super::report::{Ratio, Spread};
use super::{relay_ready, Ctx};
use crate::BenchError;
use postbox::migrate::WakeUp;
use postbox::{Event, Outbox, SchemaName};
use serde::Serialize;
use sqlx::{Connection, PgConnection};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

/// Enough consumer concurrency that the inbox is not what bounds delivery.
const CONSUMER_CONCURRENCY: usize = 32;
/// How long the backlog may take to arrive after the window.
const DRAIN_LIMIT: Duration = Duration::from_secs(120);

/// One producer count, over the repetitions.
#[derive(Debug, Clone, Serialize)]
pub struct LoadRow {
    pub producers: usize,
    pub produced_alone_per_s: Spread,
    pub produced_per_s: Spread,
    pub delivered_in_window_per_s: Spread,
    pub backlog_at_end: Spread,
    pub drain_after_s: Spread,
    pub p50_ms: Spread,
    pub p99_ms: Spread,
    pub max_ms: Spread,
}

#[derive(Debug, Clone, Serialize)]
pub struct LoadSection {
    pub window_s: f64,
    pub rows: Vec<LoadRow>,
}

impl LoadSection {
    fn print(&self) {
        println!(
            "\nThe pipeline under load: producers flat out for {:.0} s, relay → BullMQ → inbox consumer\n",
            self.window_s
        );
        println!("| producers | produced/s alone (baseline) | produced/s with relay and consumer | delivered/s within the window | backlog at the end | then drained in (s) | p50 | p99 | max (ms) |");
        println!("|---|---|---|---|---|---|---|---|---|");
        for r in &self.rows {
            println!(
                "| {} | {} | {}, {} | {} | {} | {} | {} | {} | {} |",
                r.producers,
                r.produced_alone_per_s.show(0),
                r.produced_per_s.show(0),
                Ratio::new("alone", &r.produced_per_s, &r.produced_alone_per_s).show(),
                r.delivered_in_window_per_s.show(0),
                r.backlog_at_end.show(0),
                r.drain_after_s.show(2),
                r.p50_ms.show(1),
                r.p99_ms.show(1),
                r.max_ms.show(1),
            );
        }
    }
}

pub async fn run(ctx: &Ctx) -> Result<LoadSection, BenchError> {
    let p = &ctx.p;
    println!(
        "The pipeline under load: {:?} producers flat out for {:?}, {} relay workers, consumer concurrency {CONSUMER_CONCURRENCY}, {} cores",
        p.load_producers, p.load_duration, p.relay.workers, ctx.cores
    );
    let mut rows = Vec::new();
    for &producers in &p.load_producers {
        let mut alone = Vec::new();
        let mut runs: Vec<Run> = Vec::new();
        for rep in 1..=p.reps {
            let a = produce_alone(ctx, producers).await?;
            let r = pipeline(ctx, producers, &format!("{producers}-{rep}")).await?;
            println!(
                "  rep {rep}: {producers:>2} producers  alone {a:>6.0}/s  with relay {:>6.0}/s  delivered in window {:>6.0}/s  backlog {:>6}  drained {:>5.2} s later  p50 {:>7.1}  p99 {:>7.1}  max {:>7.1} ms",
                r.produced_per_s, r.delivered_per_s, r.backlog, r.drain_after_s, r.p50, r.p99, r.max
            );
            alone.push(a);
            runs.push(r);
        }
        let col = |f: fn(&Run) -> f64| Spread::new(runs.iter().map(f).collect());
        rows.push(LoadRow {
            producers,
            produced_alone_per_s: Spread::new(alone),
            produced_per_s: col(|r| r.produced_per_s),
            delivered_in_window_per_s: col(|r| r.delivered_per_s),
            backlog_at_end: col(|r| r.backlog as f64),
            drain_after_s: col(|r| r.drain_after_s),
            p50_ms: col(|r| r.p50),
            p99_ms: col(|r| r.p99),
            max_ms: col(|r| r.max),
        });
    }
    let section = LoadSection {
        window_s: p.load_duration.as_secs_f64(),
        rows,
    };
    section.print();
    Ok(section)
}

/// One repetition with relay and consumer.
struct Run {
    produced_per_s: f64,
    delivered_per_s: f64,
    backlog: u64,
    drain_after_s: f64,
    p50: f64,
    p99: f64,
    max: f64,
}

/// When each message (by `seq`) reached the consumer's inbox commit.
#[derive(Default)]
struct Arrivals {
    at: Mutex<HashMap<u64, Instant>>,
    count: AtomicU64,
}

impl Arrivals {
    fn record(&self, msg: &postbox::Message) {
        let now = Instant::now();
        let seq = msg
            .json::<serde_json::Value>()
            .ok()
            .and_then(|d| d["seq"].as_u64());
        if let Some(seq) = seq {
            if self.at.lock().unwrap().insert(seq, now).is_none() {
                self.count.fetch_add(1, Relaxed);
            }
        }
    }
}

/// `producers` connections, each committing one outbox row per transaction
/// as fast as it can until `window` is over; returns (seq, commit instant) of
/// every message.
async fn produce(
    ctx: &Ctx,
    schema: &SchemaName,
    topic: &str,
    producers: usize,
    window: Duration,
) -> Result<Vec<(u64, Instant)>, BenchError> {
    let outbox = Outbox::new(schema.as_str())?;
    let mut conns = Vec::new();
    for _ in 0..producers {
        conns.push(PgConnection::connect(&ctx.p.database_url).await?);
    }
    let next = Arc::new(AtomicU64::new(0));
    let end = Instant::now() + window;
    let keys = ctx.p.keys as u64;
    let mut tasks = tokio::task::JoinSet::new();
    for mut conn in conns {
        let (outbox, next, topic) = (outbox.clone(), next.clone(), topic.to_owned());
        tasks.spawn(async move {
            let mut sent = Vec::new();
            while Instant::now() < end {
                let seq = next.fetch_add(1, Relaxed);
                let data = serde_json::json!({ "seq": seq, "body": super::drain::BODY });
                let mut tx = conn.begin().await?;
                outbox
                    .enqueue(
                        &mut tx,
                        Event::new(&topic, super::drain::EVENT, data)
                            .key(format!("key-{}", seq % keys)),
                    )
                    .await?;
                tx.commit().await?;
                sent.push((seq, Instant::now()));
            }
            let _ = conn.close().await;
            Ok::<_, BenchError>(sent)
        });
    }
    let mut all = Vec::new();
    while let Some(r) = tasks.join_next().await {
        all.extend(r??);
    }
    Ok(all)
}

async fn produce_alone(ctx: &Ctx, producers: usize) -> Result<f64, BenchError> {
    let schema = ctx.schema("load_alone", WakeUp::Adaptive).await?;
    let window = ctx.p.load_duration;
    let sent = produce(ctx, &schema, "alone", producers, window).await?;
    ctx.drop_schema(&schema).await?;
    Ok(sent.len() as f64 / window.as_secs_f64())
}

async fn pipeline(ctx: &Ctx, producers: usize, what: &str) -> Result<Run, BenchError> {
    let p = &ctx.p;
    let schema = ctx.schema("load", WakeUp::Adaptive).await?;
    let queue = ctx.queue_name(&format!("load-{what}"));
    let arrivals = Arc::new(Arrivals::default());
    let seen = arrivals.clone();
    let (worker, consumers) =
        recording_consumer(ctx, &schema, &queue, CONSUMER_CONCURRENCY, move |msg| {
            seen.record(msg)
        })
        .await?;
    let relay = bullmq_relay(ctx, &schema, Duration::from_secs(1))?;
    let stats = relay.stats();
    let shutdown = CancellationToken::new();
    let task = tokio::spawn(relay.run(shutdown.clone()));
    relay_ready(&stats).await?;

    let window = p.load_duration;
    let started = Instant::now();
    let sent = produce(ctx, &schema, &queue, producers, window).await?;
    let window_end = started + window;
    let produced = sent.len() as u64;
    let delivered_in_window = arrivals
        .at
        .lock()
        .unwrap()
        .values()
        .filter(|t| **t <= window_end)
        .count() as u64;
    let backlog = produced - delivered_in_window.min(produced);
    let deadline = Instant::now() + DRAIN_LIMIT;
    while arrivals.count.load(Relaxed) < produced && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let drain_after_s = window_end.elapsed().as_secs_f64();
    let received = arrivals.count.load(Relaxed);
    if received < produced {
        return Err(format!(
            "only {received} of {produced} messages arrived within {DRAIN_LIMIT:?} after the window"
        )
        .into());
    }

    worker.worker().close(100).await?;
    shutdown.cancel();
    task.await??;
    consumers.close().await;
    ctx.obliterate(&queue).await?;
    ctx.drop_schema(&schema).await?;

    let at = arrivals.at.lock().unwrap();
    let mut ms: Vec<f64> = sent
        .iter()
        .filter_map(|(seq, t)| Some(at.get(seq)?.saturating_duration_since(*t)))
        .map(|d| d.as_secs_f64() * 1000.0)
        .collect();
    ms.sort_by(f64::total_cmp);
    let pct = |q: f64| match ms.len() {
        0 => f64::NAN,
        n => ms[((q / 100.0 * n as f64).ceil() as usize).clamp(1, n) - 1],
    };
    Ok(Run {
        produced_per_s: produced as f64 / window.as_secs_f64(),
        delivered_per_s: delivered_in_window as f64 / window.as_secs_f64(),
        backlog,
        drain_after_s,
        p50: pct(50.0),
        p99: pct(99.0),
        max: ms.last().copied().unwrap_or(f64::NAN),
    })
}
