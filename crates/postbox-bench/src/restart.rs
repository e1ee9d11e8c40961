//! End-to-end latency during a rolling relay restart: two relays share the
//! partitions while producers send at a fixed rate; each is replaced in turn
//! as a rolling deploy does (the new one started and ready, then the old one
//! stopped gracefully, as by SIGTERM). The baseline is the same two relays
//! left alone, in the same run.
//!
//! A gap in delivery while partitions change hands shows as p99 and max.

use super::latency::{Measure, Timeline};
use super::parts::{bullmq_relay, pool, recording_consumer};
use super::report::{LatencyRow, LatencySection, Spread};
use super::Ctx;
use crate::BenchError;
use postbox::migrate::WakeUp;
use postbox::Outbox;
use postbox_relay::{RelayError, Stats};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

const CONSUMER_CONCURRENCY: usize = 8;
const PRODUCER_CONNECTIONS: u32 = 8;
const GRACE: Duration = Duration::from_secs(15);
const STEADY: &str = "two relays, left alone";
const ROLLING: &str = "two relays, each replaced in turn";

pub async fn run(ctx: &Ctx) -> Result<LatencySection, BenchError> {
    let p = &ctx.p;
    println!(
        "Rolling relay restart: {} msg/s for {:?}, two relays of {} workers, {} cores",
        p.rate, p.duration, p.relay.workers, ctx.cores
    );
    let mut steady = Vec::new();
    let mut rolling = Vec::new();
    for rep in 1..=p.reps {
        for (restart, what, runs) in [(false, STEADY, &mut steady), (true, ROLLING, &mut rolling)] {
            let m = measure(ctx, restart, &format!("{rep}-{restart}")).await?;
            println!(
                "  rep {rep}: {what:<36} p50 {:>7.1}  p99 {:>7.1}  max {:>7.1} ms  ({}/{} received)",
                m.2, m.4, m.5, m.1, m.0
            );
            runs.push(m);
        }
    }
    let row = |variant: &str, m: &[Measure], baseline_p50: Option<f64>| {
        let col = |f: fn(&Measure) -> f64| Spread::new(m.iter().map(f).collect());
        let p50 = col(|m| m.2);
        LatencyRow {
            variant: variant.into(),
            baseline: baseline_p50.is_none(),
            rate: p.rate,
            sent: m.iter().map(|m| m.0).sum(),
            received: m.iter().map(|m| m.1).sum(),
            p50_ratio: baseline_p50.map(|b| p50.median / b),
            p99_ratio: None,
            p50_ms: p50,
            p95_ms: col(|m| m.3),
            p99_ms: col(|m| m.4),
            max_ms: col(|m| m.5),
        }
    };
    let base = row(STEADY, &steady, None);
    let during = row(ROLLING, &rolling, Some(base.p50_ms.median));
    let section = LatencySection {
        title: "End-to-end latency during a rolling relay restart".into(),
        ratio_to: "relays left alone".into(),
        rows: vec![base, during],
    };
    section.print();
    Ok(section)
}

/// One relay of the pair, running in this process.
struct Running {
    stats: Arc<Stats>,
    shutdown: CancellationToken,
    task: JoinHandle<Result<(), RelayError>>,
}

fn start(ctx: &Ctx, schema: &postbox::SchemaName) -> Result<Running, BenchError> {
    let relay = bullmq_relay(ctx, schema, Duration::from_secs(1))?;
    let shutdown = CancellationToken::new();
    Ok(Running {
        stats: relay.stats(),
        task: tokio::spawn(relay.run(shutdown.clone())),
        shutdown,
    })
}

/// Wait until `relays` together own every partition, each some.
async fn shared(relays: &[&Running]) -> Result<(), BenchError> {
    owning(relays, "share every partition", |owned| {
        owned.iter().all(|o| *o > 0) && owned.iter().sum::<i64>() == i64::from(postbox::PARTITIONS)
    })
    .await
}

/// Wait until the partitions `relays` own satisfy `done`.
async fn owning(
    relays: &[&Running],
    what: &str,
    done: impl Fn(&[i64]) -> bool,
) -> Result<(), BenchError> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let owned: Vec<i64> = relays
            .iter()
            .map(|r| r.stats.snapshot().owned_partitions)
            .collect();
        if done(&owned) {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(
                format!("the relays did not {what} within 30 s (they own {owned:?})").into(),
            );
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// Replace relay `which` of `pair` the way a rolling deploy does (Kubernetes'
/// default surge): start the new relay, wait until it is ready (owns
/// partitions, as `/readyz` requires), then stop the old one gracefully.
async fn replace(
    ctx: &Ctx,
    schema: &postbox::SchemaName,
    pair: &mut [Running; 2],
    which: usize,
    t0: Instant,
) -> Result<(), BenchError> {
    let at = t0.elapsed();
    let begun = Instant::now();
    let new = start(ctx, schema)?;
    owning(&[&new], "make the new relay ready", |owned| owned[0] > 0).await?;
    let ready = begun.elapsed();
    let old = std::mem::replace(&mut pair[which], new);
    let stopping = Instant::now();
    old.shutdown.cancel();
    old.task.await??;
    let stopped = stopping.elapsed();
    shared(&[&pair[0], &pair[1]]).await?;
    println!(
        "         relay {} replaced at {:.1} s: new one ready in {:.0} ms, old one stopped in {:.0} ms, its partitions owned again {:.0} ms later",
        which + 1,
        at.as_secs_f64(),
        ready.as_secs_f64() * 1000.0,
        stopped.as_secs_f64() * 1000.0,
        (stopping.elapsed() - stopped).as_secs_f64() * 1000.0
    );
    Ok(())
}

async fn measure(ctx: &Ctx, restart: bool, what: &str) -> Result<Measure, BenchError> {
    let p = &ctx.p;
    let n = ((p.rate as f64 * p.duration.as_secs_f64()).round() as usize).max(1);
    let schema = ctx.schema("restart", WakeUp::Adaptive).await?;
    let queue = ctx.queue_name(&format!("restart-{what}"));
    let timeline = Arc::new(Timeline::new(n));
    let producers = pool(ctx, PRODUCER_CONNECTIONS).await?;
    let tl = timeline.clone();
    let (worker, consumers) =
        recording_consumer(ctx, &schema, &queue, CONSUMER_CONCURRENCY, move |msg| {
            tl.record(msg)
        })
        .await?;
    let mut pair = [start(ctx, &schema)?, start(ctx, &schema)?];
    shared(&[&pair[0], &pair[1]]).await?;
    let outbox = Outbox::new(schema.as_str())?;
    let keys = p.keys;

    // Open loop, as in the latency benchmark: message i at start + i/rate.
    let start_at = tokio::time::Instant::now();
    let t0 = Instant::now();
    let sender = {
        let (timeline, queue, rate) = (timeline.clone(), queue.clone(), p.rate);
        tokio::spawn(async move {
            let sent = super::parts::open_loop(
                &producers,
                &outbox,
                &timeline,
                &queue,
                (rate, keys),
                start_at,
                n,
            )
            .await;
            producers.close().await;
            sent
        })
    };
    if restart {
        for which in 0..2 {
            tokio::time::sleep_until(start_at + p.duration.mul_f64((which + 1) as f64 / 3.0)).await;
            replace(ctx, &schema, &mut pair, which, t0).await?;
        }
    }
    sender.await??;
    let deadline = Instant::now() + GRACE;
    while (timeline.received.load(Relaxed) as usize) < n && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }

    worker.worker().close(100).await?;
    for r in pair {
        r.shutdown.cancel();
        r.task.await??;
    }
    consumers.close().await;
    ctx.obliterate(&queue).await?;
    ctx.drop_schema(&schema).await?;
    Ok(timeline.measure())
}
