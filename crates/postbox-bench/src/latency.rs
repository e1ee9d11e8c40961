//! End-to-end latency: producer commit → consumer inbox commit, at fixed
//! rates, for each wake-up policy, next to a direct `queue.add` (no outbox)
//! measured the same way.
//!
//! Everything runs in this process, so both instants come from one
//! monotonic clock: the producer records when its COMMIT returned, the
//! consumer (`postbox_bullmq::inbox_worker`) when the inbox COMMIT returned
//! (`after_commit`); the message's `seq` in the payload joins the two.

use super::parts::{bullmq_relay, pool, recording_consumer};
use super::report::{LatencyRow, LatencySection, Spread};
use super::{relay_ready, Ctx};
use crate::BenchError;
use postbox::migrate::WakeUp;
use postbox::{Event, Outbox};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

/// Consumer concurrency: enough that 1,000 msg/s never queue behind each other.
const CONSUMER_CONCURRENCY: usize = 8;
/// Producer connections: messages are sent on schedule (open loop), each in
/// its own transaction, whatever the previous one is doing.
const PRODUCER_CONNECTIONS: u32 = 8;
/// After the last message is sent, how long stragglers may take.
const GRACE: Duration = Duration::from_secs(15);

#[derive(Clone, Copy)]
enum Variant {
    /// The dual write the outbox replaces: `queue.add` right after the commit.
    Direct,
    /// Outbox row in the producer's transaction; relay woken by this policy.
    Outbox { notify: WakeUp, poll: Duration },
}

impl Variant {
    fn label(&self) -> String {
        match self {
            Variant::Direct => "direct queue.add after commit (no outbox)".into(),
            Variant::Outbox {
                notify: WakeUp::Statement,
                poll,
            } => format!("outbox, notify = statement (poll {poll:?})"),
            Variant::Outbox {
                notify: WakeUp::Adaptive,
                poll,
            } => format!("outbox, notify = adaptive (poll {poll:?})"),
            Variant::Outbox {
                notify: WakeUp::Logical,
                poll,
            } => format!("outbox, notify = logical (poll {poll:?})"),
            Variant::Outbox { poll, .. } => format!("outbox, notify = off, poll {poll:?}"),
        }
    }
}

pub async fn run(ctx: &Ctx) -> Result<LatencySection, BenchError> {
    let p = &ctx.p;
    println!(
        "End-to-end latency: {:?} per rate at {:?} msg/s, consumer concurrency {CONSUMER_CONCURRENCY}, {} cores",
        p.duration, p.rates, ctx.cores
    );
    let mut variants = vec![
        Variant::Direct,
        Variant::Outbox {
            notify: WakeUp::Adaptive,
            poll: Duration::from_secs(1),
        },
        Variant::Outbox {
            notify: WakeUp::Statement,
            poll: Duration::from_secs(1),
        },
    ];
    if logical_available(ctx).await? {
        variants.push(Variant::Outbox {
            notify: WakeUp::Logical,
            poll: Duration::from_secs(1),
        });
    }
    variants.extend(p.poll_intervals.iter().map(|poll| Variant::Outbox {
        notify: WakeUp::Off,
        poll: *poll,
    }));
    // [rate][variant] → per repetition: (sent, received, p50, p95, p99, max)
    let mut runs = vec![vec![Vec::new(); variants.len()]; p.rates.len()];
    for rep in 1..=p.reps {
        for (ri, rate) in p.rates.iter().enumerate() {
            for (vi, v) in variants.iter().enumerate() {
                let m = measure(ctx, *v, *rate, &format!("{rep}-{ri}-{vi}")).await?;
                println!(
                    "  rep {rep}: {:<44} {rate:>6} msg/s  p50 {:>7.1}  p99 {:>7.1}  max {:>7.1} ms  ({}/{} received)",
                    v.label(),
                    m.2,
                    m.4,
                    m.5,
                    m.1,
                    m.0
                );
                runs[ri][vi].push(m);
            }
        }
    }
    let mut rows = Vec::new();
    for (ri, rate) in p.rates.iter().enumerate() {
        let mut baseline_p50 = None;
        for (vi, v) in variants.iter().enumerate() {
            let m = &runs[ri][vi];
            let col = |f: fn(&Measure) -> f64| Spread::new(m.iter().map(f).collect());
            let p50 = col(|m| m.2);
            let ratio = baseline_p50.map(|b: f64| p50.median / b);
            if matches!(v, Variant::Direct) {
                baseline_p50 = Some(p50.median);
            }
            rows.push(LatencyRow {
                variant: v.label(),
                baseline: matches!(v, Variant::Direct),
                rate: *rate,
                sent: m.iter().map(|m| m.0).sum(),
                received: m.iter().map(|m| m.1).sum(),
                p50_ms: p50,
                p95_ms: col(|m| m.3),
                p99_ms: col(|m| m.4),
                max_ms: col(|m| m.5),
                p50_ratio: ratio,
                p99_ratio: None,
            });
        }
    }
    let section = LatencySection {
        title: "End-to-end latency, producer commit → consumer inbox commit".into(),
        ratio_to: "direct add".into(),
        rows,
    };
    section.print();
    Ok(section)
}

/// (sent, received, p50, p95, p99, max) of one run, in ms.
pub(super) type Measure = (u64, u64, f64, f64, f64, f64);

/// When each message was committed by the producer and by the consumer.
pub(super) struct Timeline {
    pub(super) sent: Mutex<Vec<Option<Instant>>>,
    done: Mutex<Vec<Option<Instant>>>,
    pub(super) received: AtomicU64,
}

impl Timeline {
    /// Room for messages `0..n`.
    pub(super) fn new(n: usize) -> Self {
        Timeline {
            sent: Mutex::new(vec![None; n]),
            done: Mutex::new(vec![None; n]),
            received: AtomicU64::new(0),
        }
    }

    /// Commit message `seq` as an outbox row for `topic` in a transaction of
    /// its own, and record when the commit returned.
    pub(super) async fn enqueue(
        &self,
        pool: &sqlx::PgPool,
        outbox: &Outbox,
        topic: &str,
        seq: usize,
        keys: i64,
    ) -> Result<(), BenchError> {
        let data = serde_json::json!({ "seq": seq, "body": super::drain::BODY });
        let mut tx = pool.begin().await?;
        outbox
            .enqueue(
                &mut tx,
                Event::new(topic, super::drain::EVENT, data)
                    .key(format!("key-{}", seq as i64 % keys)),
            )
            .await?;
        tx.commit().await?;
        self.sent.lock().unwrap()[seq] = Some(Instant::now());
        Ok(())
    }

    /// Every message sent, how many arrived, and the percentiles of those that did.
    pub(super) fn measure(&self) -> Measure {
        let n = self.sent.lock().unwrap().len();
        self.measure_range(0..n)
    }

    /// [`Timeline::measure`] of messages `seqs` only (those of a window).
    pub(super) fn measure_range(&self, seqs: std::ops::Range<usize>) -> Measure {
        let sent = self.sent.lock().unwrap();
        let done = self.done.lock().unwrap();
        let seqs = seqs.start.min(sent.len())..seqs.end.min(sent.len());
        let count = seqs.len();
        let mut ms: Vec<f64> = sent[seqs.clone()]
            .iter()
            .zip(&done[seqs])
            .filter_map(|(s, d)| Some(d.as_ref()?.saturating_duration_since(*s.as_ref()?)))
            .map(|d| d.as_secs_f64() * 1000.0)
            .collect();
        ms.sort_by(f64::total_cmp);
        let pct = |q: f64| {
            if ms.is_empty() {
                f64::NAN
            } else {
                ms[((q / 100.0 * ms.len() as f64).ceil() as usize).clamp(1, ms.len()) - 1]
            }
        };
        (
            count as u64,
            ms.len() as u64,
            pct(50.0),
            pct(95.0),
            pct(99.0),
            ms.last().copied().unwrap_or(f64::NAN),
        )
    }

    /// The consumer's inbox transaction for this job has just committed.
    pub(super) fn record(&self, msg: &postbox::Message) {
        let now = Instant::now();
        let seq = msg
            .json::<serde_json::Value>()
            .ok()
            .and_then(|d| d["seq"].as_u64())
            .unwrap_or(u64::MAX) as usize;
        if let Some(slot) = self.done.lock().unwrap().get_mut(seq) {
            *slot = Some(now);
            self.received.fetch_add(1, Relaxed);
        }
    }
}

async fn measure(ctx: &Ctx, v: Variant, rate: u64, what: &str) -> Result<Measure, BenchError> {
    let p = &ctx.p;
    let n = ((rate as f64 * p.duration.as_secs_f64()).round() as usize).max(1);
    let schema = ctx
        .schema(
            "latency",
            match v {
                Variant::Outbox { notify, .. } => notify,
                Variant::Direct => WakeUp::Off,
            },
        )
        .await?;
    let queue = ctx.queue_name(&format!("latency-{what}"));
    let timeline = Arc::new(Timeline::new(n));
    let producers = pool(ctx, PRODUCER_CONNECTIONS).await?;
    let tl = timeline.clone();
    let (worker, consumers) =
        recording_consumer(ctx, &schema, &queue, CONSUMER_CONCURRENCY, move |msg| {
            tl.record(msg)
        })
        .await?;
    let shutdown = CancellationToken::new();
    let relay = match v {
        Variant::Outbox { poll, .. } => {
            let relay = bullmq_relay(ctx, &schema, poll)?;
            let stats = relay.stats();
            let task = tokio::spawn(relay.run(shutdown.clone()));
            relay_ready(&stats).await?;
            if matches!(
                v,
                Variant::Outbox {
                    notify: WakeUp::Logical,
                    ..
                }
            ) {
                logical_streaming(ctx).await?;
            }
            Some(task)
        }
        Variant::Direct => None,
    };
    let direct = Arc::new(ctx.queue(&queue).await?);
    let outbox = Outbox::new(schema.as_str())?;
    let keys = p.keys;

    // Open loop: message i is sent at start + i/rate, whether or not the
    // previous ones are done (a slow system must not slow its own load).
    let start = tokio::time::Instant::now();
    let mut sends = tokio::task::JoinSet::new();
    for seq in 0..n {
        tokio::time::sleep_until(start + Duration::from_secs_f64(seq as f64 / rate as f64)).await;
        let (pool, outbox, direct, tl) = (
            producers.clone(),
            outbox.clone(),
            direct.clone(),
            timeline.clone(),
        );
        sends.spawn(async move {
            match v {
                Variant::Direct => {
                    let data = serde_json::json!({ "seq": seq, "body": super::drain::BODY });
                    // The producer's commit would be here; the latency starts now.
                    tl.sent.lock().unwrap()[seq] = Some(Instant::now());
                    direct
                        .add(super::drain::EVENT, data)
                        .job_id(uuid::Uuid::new_v4().to_string())
                        .await?;
                }
                Variant::Outbox { .. } => {
                    tl.enqueue(&pool, &outbox, direct.name(), seq, keys).await?;
                }
            }
            Ok::<_, BenchError>(())
        });
    }
    while let Some(r) = sends.join_next().await {
        r??;
    }
    let deadline = Instant::now() + GRACE;
    while (timeline.received.load(Relaxed) as usize) < n && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }

    worker.worker().close(100).await?;
    shutdown.cancel();
    if let Some(task) = relay {
        task.await??;
    }
    producers.close().await;
    consumers.close().await;
    ctx.obliterate(&queue).await?;
    drop_publication(ctx, &schema).await?;
    ctx.drop_schema(&schema).await?;

    Ok(timeline.measure())
}

/// Whether the bench's server can run `notify = logical` (wal_level =
/// logical); if not, one line says why its rows are skipped.
pub(super) async fn logical_available(ctx: &Ctx) -> Result<bool, BenchError> {
    let wal_level: String = sqlx::query_scalar("SELECT current_setting('wal_level')")
        .fetch_one(&ctx.pool)
        .await?;
    if wal_level == "logical" {
        return Ok(true);
    }
    println!(
        "  notify = logical: skipped, the server has wal_level = {wal_level} (logical decoding needs wal_level = logical: ALTER SYSTEM SET wal_level = logical, then restart PostgreSQL)"
    );
    Ok(false)
}

/// Wait until the in-process relay's logical wake-up session streams, so the
/// measurement does not start on polling.
pub(super) async fn logical_streaming(ctx: &Ctx) -> Result<(), BenchError> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let n: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM pg_stat_replication WHERE application_name LIKE 'postbox-relay:' || $1 || ':%:logical'",
        )
        .bind(std::process::id().to_string())
        .fetch_one(&ctx.pool)
        .await?;
        if n > 0 {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err("the relay's logical wake-up did not start streaming within 20 s (REPLICATION attribute? max_wal_senders?)".into());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// `DROP SCHEMA ... CASCADE` leaves a `--notify logical` publication behind
/// (empty): drop it first.
pub(super) async fn drop_publication(
    ctx: &Ctx,
    schema: &postbox::SchemaName,
) -> Result<(), BenchError> {
    sqlx::raw_sql(&format!(
        "DROP PUBLICATION IF EXISTS {}",
        postbox::migrate::publication_name(schema)
    ))
    .execute(&ctx.pool)
    .await?;
    Ok(())
}
