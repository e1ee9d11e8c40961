//! One relay of two cut off from its broker, or only slow to reach it: what
//! `unavailable_after` trades. Two relays share a schema while producers send
//! at `--rate`; relay A reaches Redis directly, relay B through a fault proxy.
//! For each of `--unavailable-afters`, four runs, each with fresh relays:
//!
//! - **no fault**: the baseline;
//! - **cut**: after a settle, B's proxy forwards nothing (nothing closed) for
//!   `--cut-hold`, then heals; latency of what was produced from the cut to
//!   5 s after the heal, and when B's partitions went to A and came back;
//! - **slow in bursts**: B's proxy adds `--burst-latency` each way for 2 s of
//!   every 5; **slow throughout**: `--steady-latency` each way for the whole
//!   run. A broker that answers, slowly: a stand-by here is a false alarm.
//!
//! Stand-bys are read as the others read them: B's `taking_partitions` in
//! `outbox_relays`, sampled every 200 ms, going from true to false.

use super::latency::{Measure, Timeline};
use super::parts::{bullmq_relay_with, inbox_consumer, pool};
use super::report::{Ratio, SickRelayRow, SickRelaySection, Spread};
use super::{relay_ready, Ctx};
use crate::BenchError;
use postbox::migrate::WakeUp;
use postbox::{Outbox, SchemaName};
use postbox_relay::{RelayError, Stats};
use postbox_testkit::Proxy;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

mod observe;
use observe::{fault, monitor, Seen};

const CONSUMER_CONCURRENCY: usize = 8;
const PRODUCER_CONNECTIONS: u32 = 8;
/// After the last message is sent, how long the rest may take.
const GRACE: Duration = Duration::from_secs(30);
/// After a heal, how long B may take to own partitions again.
const BACK_WITHIN: Duration = Duration::from_secs(30);
/// Produced after the heal, and measured with the cut.
const AFTER: Duration = Duration::from_secs(5);
/// Longest settle before a cut (shorter when `--duration` is).
const SETTLE: Duration = Duration::from_secs(5);
/// A burst of latency lasts this long, once every `BURST_EVERY`.
const BURST_ON: Duration = Duration::from_secs(2);
const BURST_EVERY: Duration = Duration::from_secs(5);
/// How often the relays' health records are read.
const RECORDS_EVERY: Duration = Duration::from_millis(200);

#[derive(Clone, Copy, PartialEq, Eq)]
enum Workload {
    NoFault,
    Cut,
    Bursts,
    Steady,
}

const WORKLOADS: [Workload; 4] = [
    Workload::NoFault,
    Workload::Cut,
    Workload::Bursts,
    Workload::Steady,
];

impl Workload {
    fn label(self, ctx: &Ctx) -> String {
        let p = &ctx.p;
        let d = |d: Duration| humantime_serde::re::humantime::format_duration(d).to_string();
        match self {
            Workload::NoFault => "no fault (baseline)".into(),
            Workload::Cut => format!("cut for {}", d(p.cut_hold)),
            Workload::Bursts => format!(
                "slow in bursts: +{} each way, {} of every {}",
                d(p.burst_latency),
                d(BURST_ON),
                d(BURST_EVERY)
            ),
            Workload::Steady => format!("slow throughout: +{} each way", d(p.steady_latency)),
        }
    }

    /// How long the producers send.
    fn span(self, ctx: &Ctx) -> Duration {
        match self {
            Workload::Cut => settle(ctx) + ctx.p.cut_hold + AFTER,
            _ => ctx.p.duration,
        }
    }
}

fn settle(ctx: &Ctx) -> Duration {
    ctx.p.duration.min(SETTLE)
}

/// What one run measured.
struct Run {
    /// Over the window: the cut and 5 s after it, or the whole run.
    window: Measure,
    /// Over the whole run.
    all: Measure,
    duplicates: u64,
    standbys: u64,
    standbys_recorded: u64,
    other_standbys: u64,
    idle: Duration,
    handover: Option<Duration>,
    back: Option<Duration>,
    never_back: bool,
}

pub async fn run(ctx: &Ctx) -> Result<SickRelaySection, BenchError> {
    let p = &ctx.p;
    println!(
        "One relay cut off from its broker, or slow to reach it: {} msg/s, two relays of {} workers, unavailable_after {:?}, {} cores",
        p.rate, p.relay.workers, p.unavailable_afters, ctx.cores
    );
    let mut runs: Vec<Vec<Vec<Run>>> = p
        .unavailable_afters
        .iter()
        .map(|_| WORKLOADS.iter().map(|_| Vec::new()).collect())
        .collect();
    for rep in 1..=p.reps {
        for (ui, after) in p.unavailable_afters.iter().enumerate() {
            for (wi, w) in WORKLOADS.iter().enumerate() {
                let r = measure(ctx, *after, *w, &format!("{rep}-{ui}-{wi}")).await?;
                let m = &r.window;
                println!(
                    "  rep {rep}: unavailable_after {after:?}, {:<52} p50 {:>7.1}  p99 {:>7.1}  max {:>8.1} ms  ({}/{} received, {} duplicates, {} stand-bys)",
                    w.label(ctx), m.2, m.4, m.5, r.all.1, r.all.0, r.duplicates, r.standbys
                );
                runs[ui][wi].push(r);
            }
        }
    }
    let mut rows = Vec::new();
    for (after, by_workload) in p.unavailable_afters.iter().zip(&runs) {
        let base = row(ctx, *after, WORKLOADS[0], &by_workload[0], None);
        let base_p99 = base.p99_ms.clone();
        rows.push(base);
        for (w, r) in WORKLOADS.iter().zip(by_workload).skip(1) {
            rows.push(row(ctx, *after, *w, r, Some(&base_p99)));
        }
    }
    let section = SickRelaySection {
        rate: p.rate,
        cut_hold_s: p.cut_hold.as_secs_f64(),
        rows,
    };
    section.print();
    Ok(section)
}

/// The row of one workload at one `unavailable_after`, over its repetitions.
fn row(
    ctx: &Ctx,
    after: Duration,
    w: Workload,
    runs: &[Run],
    base_p99: Option<&Spread>,
) -> SickRelayRow {
    let col = |f: fn(&Measure) -> f64| Spread::new(runs.iter().map(|r| f(&r.window)).collect());
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let some = |v: Vec<f64>| (!v.is_empty()).then(|| Spread::new(v));
    let p99 = col(|m| m.4);
    SickRelayRow {
        unavailable_after_ms: after.as_millis() as u64,
        workload: w.label(ctx),
        baseline: w == Workload::NoFault,
        window_sent: runs.iter().map(|r| r.window.0).sum(),
        window_received: runs.iter().map(|r| r.window.1).sum(),
        sent: runs.iter().map(|r| r.all.0).sum(),
        received: runs.iter().map(|r| r.all.1).sum(),
        duplicates: runs.iter().map(|r| r.duplicates).sum(),
        p50_ms: col(|m| m.2),
        p95_ms: col(|m| m.3),
        p99_ratio: base_p99.map(|b| Ratio::new("no fault", &p99, b)),
        p99_ms: p99,
        max_ms: col(|m| m.5),
        standbys: Spread::new(runs.iter().map(|r| r.standbys as f64).collect()),
        idle_s: Spread::new(runs.iter().map(|r| r.idle.as_secs_f64()).collect()),
        standbys_recorded: runs.iter().map(|r| r.standbys_recorded).sum(),
        other_standbys: runs.iter().map(|r| r.other_standbys).sum(),
        handover_ms: some(runs.iter().filter_map(|r| r.handover.map(ms)).collect()),
        back_ms: some(runs.iter().filter_map(|r| r.back.map(ms)).collect()),
        never_back: runs.iter().filter(|r| r.never_back).count() as u64,
    }
}

/// The consumer's handler: the inbox row alone; records each first receipt
/// on the timeline and counts what the inbox skipped as a duplicate.
struct Recording {
    timeline: Arc<Timeline>,
    duplicates: Arc<AtomicU64>,
}

impl postbox::Handler for Recording {
    async fn handle(
        &self,
        _: &mut sqlx::PgConnection,
        _: &postbox::Message,
    ) -> Result<(), postbox_relay::BoxError> {
        Ok(())
    }
    async fn after_commit(&self, msg: &postbox::Message) {
        self.timeline.record(msg)
    }
    async fn on_duplicate(&self, _: &postbox::Message) {
        self.duplicates.fetch_add(1, Relaxed);
    }
}

/// One relay of the pair, running in this process.
struct Running {
    stats: Arc<Stats>,
    shutdown: CancellationToken,
    task: JoinHandle<Result<(), RelayError>>,
}

fn start(
    ctx: &Ctx,
    schema: &SchemaName,
    after: Duration,
    redis_url: &str,
) -> Result<Running, BenchError> {
    let config = postbox_relay::Config {
        unavailable_after: after,
        ..ctx.relay_config(schema, Duration::from_secs(1))
    };
    let relay = bullmq_relay_with(config, redis_url)?;
    let shutdown = CancellationToken::new();
    Ok(Running {
        stats: relay.stats(),
        task: tokio::spawn(relay.run(shutdown.clone())),
        shutdown,
    })
}

/// Relay A (direct) and relay B (through `proxy`), sharing the partitions;
/// and A's instance in `outbox_relays`, so that the other one is B.
async fn pair(
    ctx: &Ctx,
    schema: &SchemaName,
    after: Duration,
    proxy: &Proxy,
) -> Result<([Running; 2], Vec<String>), BenchError> {
    let a = start(ctx, schema, after, &ctx.p.redis_url)?;
    relay_ready(&a.stats).await?;
    let a_instance = instances(ctx, schema).await?.into_keys().collect();
    let b = start(
        ctx,
        schema,
        after,
        &proxied(&ctx.p.redis_url, proxy.port())?,
    )?;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let owned = [&a, &b].map(|r| r.stats.snapshot().owned_partitions);
        if owned[1] > 0 && owned[0] + owned[1] == i64::from(postbox::PARTITIONS) {
            return Ok(([a, b], a_instance));
        }
        if Instant::now() > deadline {
            let records: Vec<(String, bool, i32, Option<String>, serde_json::Value)> =
                sqlx::query_as(&format!(
                    "SELECT instance, taking_partitions, owned_partitions, \
                            (now() - unavailable_since)::text, sinks FROM {schema}.outbox_relays"
                ))
                .fetch_all(&ctx.pool)
                .await?;
            return Err(format!(
                "the two relays did not share the partitions within 30 s: A ({a_instance:?}) owns {}, \
                 B owns {}; their records (instance, taking, owned, unavailable for, sinks): {records:?}",
                owned[0], owned[1]
            )
            .into());
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// Every relay's `taking_partitions` in `schema`'s `outbox_relays`.
async fn instances(ctx: &Ctx, schema: &SchemaName) -> Result<HashMap<String, bool>, BenchError> {
    let rows: Vec<(String, bool)> = sqlx::query_as(&format!(
        "SELECT instance, taking_partitions FROM {schema}.outbox_relays"
    ))
    .fetch_all(&ctx.pool)
    .await?;
    Ok(rows.into_iter().collect())
}

/// The address of the Redis at `url`, for the proxy to forward to.
async fn redis_target(url: &str) -> Result<std::net::SocketAddr, BenchError> {
    let u = reqwest::Url::parse(url).map_err(|e| format!("Redis URL: {e}"))?;
    let host = u.host_str().ok_or("Redis URL: no host")?.to_owned();
    let port = u.port().unwrap_or(6379);
    let found = tokio::net::lookup_host((host.as_str(), port)).await?.next();
    Ok(found.ok_or_else(|| format!("Redis URL: {host} does not resolve"))?)
}

/// `url` with its host and port replaced by the proxy's.
fn proxied(url: &str, port: u16) -> Result<String, BenchError> {
    let mut u = reqwest::Url::parse(url).map_err(|e| format!("Redis URL: {e}"))?;
    u.set_host(Some("127.0.0.1"))?;
    u.set_port(Some(port)).map_err(|()| "Redis URL: no port")?;
    Ok(u.to_string())
}

/// [`open_loop`](super::parts::open_loop) for every message of `timeline`,
/// then the producers' pool closed.
fn produce(
    ctx: &Ctx,
    producers: sqlx::PgPool,
    outbox: Outbox,
    timeline: Arc<Timeline>,
    queue: &str,
    start: tokio::time::Instant,
) -> JoinHandle<Result<(), BenchError>> {
    let (queue, rate, keys) = (queue.to_owned(), ctx.p.rate, ctx.p.keys);
    let n = timeline.sent.lock().unwrap().len();
    tokio::spawn(async move {
        let sent = super::parts::open_loop(
            &producers,
            &outbox,
            &timeline,
            &queue,
            (rate, keys),
            start,
            n,
        )
        .await;
        producers.close().await;
        sent
    })
}

/// Wait until `n` messages arrived, or `within` passed.
async fn arrived(timeline: &Timeline, n: usize, within: Duration) {
    let deadline = Instant::now() + within;
    while (timeline.received.load(Relaxed) as usize) < n && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// One run of workload `w` with fresh relays, schema, queue and consumer.
async fn measure(ctx: &Ctx, after: Duration, w: Workload, tag: &str) -> Result<Run, BenchError> {
    let n = ((ctx.p.rate as f64 * w.span(ctx).as_secs_f64()).round() as usize).max(1);
    let schema = ctx.schema("sick", WakeUp::Adaptive).await?;
    let queue = ctx.queue_name(&format!("sick-{tag}"));
    let timeline = Arc::new(Timeline::new(n));
    let duplicates = Arc::new(AtomicU64::new(0));
    let producers = pool(ctx, PRODUCER_CONNECTIONS).await?;
    let handler = Recording {
        timeline: timeline.clone(),
        duplicates: duplicates.clone(),
    };
    let (worker, consumers) =
        inbox_consumer(ctx, &schema, &queue, CONSUMER_CONCURRENCY, handler).await?;
    let proxy = Proxy::start(redis_target(&ctx.p.redis_url).await?).await?;
    let (relays, a_instance) = pair(ctx, &schema, after, &proxy).await?;
    let stop = CancellationToken::new();
    let watching = monitor(
        ctx,
        &schema,
        [relays[0].stats.clone(), relays[1].stats.clone()],
        &a_instance,
        stop.clone(),
    );
    let run = async {
        let start = tokio::time::Instant::now();
        let outbox = Outbox::new(schema.as_str())?;
        let sender = produce(ctx, producers, outbox, timeline.clone(), &queue, start);
        let faults = CancellationToken::new();
        let (cut, sent) = tokio::join!(fault(w, &proxy, ctx, start, faults.clone()), async {
            let sent = sender.await;
            if matches!(sent, Ok(Ok(()))) {
                arrived(&timeline, n, GRACE).await;
            }
            faults.cancel();
            sent
        });
        sent??;
        proxy.pass();
        // A cut-off relay that stood by takes its share back once healed.
        let stood_by = relays[1].stats.snapshot().owned_partitions == 0;
        if let (Some(_), true) = (cut, stood_by) {
            let deadline = Instant::now() + BACK_WITHIN;
            while relays[1].stats.snapshot().owned_partitions == 0 && Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
        Ok::<_, BenchError>(cut)
    };
    // The monitor stops when the run ends, also with an error.
    let (seen, cut) = tokio::join!(watching, async {
        let cut = run.await;
        stop.cancel();
        cut
    });
    let (seen, cut) = (seen?, cut?);
    let end = Instant::now();

    worker.worker().close(100).await?;
    for r in relays {
        r.shutdown.cancel();
        r.task.await??;
    }
    consumers.close().await;
    drop(proxy);
    ctx.obliterate(&queue).await?;
    ctx.drop_schema(&schema).await?;
    Ok(summary(
        &timeline,
        ctx,
        w,
        &seen,
        cut,
        end,
        duplicates.load(Relaxed),
    ))
}

/// The figures of one run from its timeline and what the monitor saw.
fn summary(
    timeline: &Timeline,
    ctx: &Ctx,
    w: Workload,
    seen: &Seen,
    cut: Option<(Instant, Instant)>,
    end: Instant,
    duplicates: u64,
) -> Run {
    let all = timeline.measure();
    let from = match w {
        Workload::Cut => (ctx.p.rate as f64 * settle(ctx).as_secs_f64()) as usize,
        _ => 0,
    };
    let full = i64::from(postbox::PARTITIONS);
    let handover = cut.and_then(|(at, _)| seen.first(at, |a, b| b == 0 && a == full));
    let back = cut.and_then(|(_, healed)| seen.first(healed, |_, b| b > 0));
    Run {
        window: timeline.measure_range(from..all.0 as usize),
        all,
        duplicates,
        standbys: seen.drops(true),
        standbys_recorded: seen.recorded[0],
        other_standbys: seen.drops(false) + seen.recorded[1],
        idle: seen.idle(end),
        handover,
        // Back only counts after a stand-by (B keeps its partitions through a short cut).
        back: handover.and(back),
        never_back: handover.is_some() && back.is_none(),
    }
}
