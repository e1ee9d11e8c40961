//! End-to-end latency of live events while `postbox replay` sends history
//! again: a schema holds `--replay-events` sent rows of a topic `history`
//! (what a relay with `sent = "mark"` retains); producers send live events at
//! `--rate` through one relay to BullMQ and the inbox consumer, while the
//! `postbox` binary replays the history at each `--replay-rates` pace. The
//! replayed events go to a sink that acknowledges at once (a route of the
//! same relay), so what is measured is what the replay costs the database
//! and the relay's batches, not a broker's or consumer's capacity. The
//! baseline is the same relay and live load with no replay, in the same run.
//!
//! Each window lasts `--duration`; the replay is interrupted at its end
//! (SIGINT, as an operator would) and the next pace replays from the start.

use super::latency::{Measure, Timeline};
use super::parts::{pool, recording_consumer, until_none, NullSink};
use super::report::{LatencyRow, LatencySection, Spread};
use super::Ctx;
use crate::BenchError;
use postbox::migrate::WakeUp;
use postbox::{Outbox, SchemaName};
use postbox_bullmq::{BullmqConfig, BullmqSink};
use postbox_relay::{Relay, Router, Secret, TopicPattern};
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

const CONSUMER_CONCURRENCY: usize = 8;
const PRODUCER_CONNECTIONS: u32 = 8;
const GRACE: Duration = Duration::from_secs(15);
const HISTORY: &str = "history";

pub async fn run(ctx: &Ctx) -> Result<LatencySection, BenchError> {
    let p = &ctx.p;
    let postbox = postbox_binary()?;
    println!(
        "Replay: {} live msg/s for {:?} while {} retained events are replayed, {} cores",
        p.rate, p.duration, p.replay_events, ctx.cores
    );
    let schema = ctx.schema("replay", WakeUp::Adaptive).await?;
    let seeded = Instant::now();
    history(ctx, &schema, p.replay_events).await?;
    println!(
        "  {} sent rows of topic {HISTORY} written in {:.1} s",
        p.replay_events,
        seeded.elapsed().as_secs_f64()
    );
    let mut paces: Vec<Option<u64>> = vec![None];
    paces.extend(p.replay_rates.iter().map(|r| Some(*r)));
    let mut runs: Vec<Vec<Measure>> = vec![Vec::new(); paces.len()];
    for rep in 1..=p.reps {
        for (i, pace) in paces.iter().enumerate() {
            let (m, replayed) =
                measure(ctx, &schema, &postbox, *pace, &format!("{rep}-{i}")).await?;
            println!(
                "  rep {rep}: {:<28} p50 {:>7.1}  p99 {:>7.1}  max {:>7.1} ms  ({}/{} received; {replayed} replayed, {:.0}/s)",
                label(*pace),
                m.2,
                m.4,
                m.5,
                m.1,
                m.0,
                replayed as f64 / p.duration.as_secs_f64()
            );
            runs[i].push(m);
        }
    }
    ctx.drop_schema(&schema).await?;
    let mut rows = Vec::new();
    let mut base_p50 = None;
    for (pace, m) in paces.iter().zip(&runs) {
        let col = |f: fn(&Measure) -> f64| Spread::new(m.iter().map(f).collect());
        let p50 = col(|m| m.2);
        rows.push(LatencyRow {
            variant: label(*pace),
            baseline: pace.is_none(),
            rate: p.rate,
            sent: m.iter().map(|m| m.0).sum(),
            received: m.iter().map(|m| m.1).sum(),
            p50_ratio: base_p50.map(|b| p50.median / b),
            p50_ms: p50,
            p95_ms: col(|m| m.3),
            p99_ms: col(|m| m.4),
            max_ms: col(|m| m.5),
        });
        base_p50 = base_p50.or(Some(rows[0].p50_ms.median));
    }
    let section = LatencySection {
        title: "Live end-to-end latency during a replay".into(),
        ratio_to: "no replay".into(),
        rows,
    };
    section.print();
    Ok(section)
}

fn label(pace: Option<u64>) -> String {
    match pace {
        None => "no replay".into(),
        Some(0) => "replay, --rate 0 (unlimited)".into(),
        Some(r) => format!("replay, --rate {r}"),
    }
}

/// The `postbox` binary beside this one (the replay is the CLI's).
fn postbox_binary() -> Result<std::path::PathBuf, BenchError> {
    let exe = std::env::current_exe()?;
    let bin = exe.with_file_name("postbox");
    if !bin.exists() {
        return Err(format!(
            "the replay benchmark runs the postbox binary, and {} does not exist: build it beside this one (cargo build --release -p postbox-cli)",
            bin.display()
        )
        .into());
    }
    Ok(bin)
}

/// `n` sent rows of topic `history` over 1,000 keys, with the bench's payload.
async fn history(ctx: &Ctx, schema: &SchemaName, n: u64) -> Result<(), BenchError> {
    sqlx::query(&format!(
        "INSERT INTO {schema}.outbox (topic, event, key, payload, sent_at, xid)
         SELECT $1, $2, 'h-' || (i % 1000), jsonb_build_object('body', $3::text), now(), '1'
           FROM generate_series(1, $4::bigint) i"
    ))
    .bind(HISTORY)
    .bind(super::drain::EVENT)
    .bind(super::drain::BODY)
    .bind(n as i64)
    .execute(&ctx.pool)
    .await?;
    sqlx::raw_sql(&format!("VACUUM ANALYZE {schema}.outbox"))
        .execute(&ctx.pool)
        .await?;
    Ok(())
}

/// One window: live events at `--rate` with their latency, and, with `pace`,
/// a `postbox replay` of the history at that pace started with the window
/// and interrupted at its end. Returns the window's figures and how many
/// events the replay made unsent again.
async fn measure(
    ctx: &Ctx,
    schema: &SchemaName,
    postbox: &std::path::Path,
    pace: Option<u64>,
    what: &str,
) -> Result<(Measure, u64), BenchError> {
    let p = &ctx.p;
    let n = ((p.rate as f64 * p.duration.as_secs_f64()).round() as usize).max(1);
    let queue = ctx.queue_name(&format!("replay-{what}"));
    let timeline = Arc::new(Timeline::new(n));
    let producers = pool(ctx, PRODUCER_CONNECTIONS).await?;
    let tl = timeline.clone();
    let (worker, consumers) =
        recording_consumer(ctx, schema, &queue, CONSUMER_CONCURRENCY, move |msg| {
            tl.record(msg)
        })
        .await?;
    let bullmq = BullmqSink::new(BullmqConfig {
        redis_url: Secret::new(p.redis_url.clone()),
        ..Default::default()
    })?;
    let router = Router::new(Arc::new(postbox_relay::Delivery::new(bullmq)))
        .route(TopicPattern::new(HISTORY), Arc::new(NullSink));
    let relay = Relay::new(
        ctx.relay_config(schema, Duration::from_secs(1)),
        Arc::new(router),
    )?;
    let stats = relay.stats();
    let shutdown = CancellationToken::new();
    let task = tokio::spawn(relay.run(shutdown.clone()));
    super::parts::relay_ready(&stats).await?;
    let outbox = Outbox::new(schema.as_str())?;

    let mut replay = match pace {
        None => None,
        Some(rate) => Some(
            tokio::process::Command::new(postbox)
                .args(["replay", "--schema", schema.as_str(), "--since", "1d"])
                .args(["--topic", HISTORY, "--rate", &rate.to_string(), "--yes"])
                .env("DATABASE_URL", &p.database_url)
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .kill_on_drop(true)
                .spawn()?,
        ),
    };
    let start_at = tokio::time::Instant::now();
    super::parts::open_loop(
        &producers,
        &outbox,
        &timeline,
        &queue,
        (p.rate, p.keys),
        start_at,
        n,
    )
    .await?;
    if let Some(child) = &mut replay {
        if let Some(pid) = child.id() {
            std::process::Command::new("kill")
                .args(["-INT", &pid.to_string()])
                .status()?;
        }
        child.wait().await?;
    }
    let deadline = Instant::now() + GRACE;
    while (timeline.received.load(Relaxed) as usize) < n && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // Every row of the history sent again before the next window.
    let replayed: i64 = sqlx::query_scalar(&format!(
        "SELECT count(*) FROM {schema}.outbox WHERE topic = $1 AND xid > '1'"
    ))
    .bind(HISTORY)
    .fetch_one(&ctx.pool)
    .await?;
    until_none(
        &ctx.pool,
        &format!("SELECT count(*) FROM {schema}.outbox WHERE sent_at IS NULL"),
        "unsent rows of the window",
    )
    .await?;
    sqlx::query(&format!(
        "UPDATE {schema}.outbox SET xid = '1' WHERE topic = $1 AND xid > '1'"
    ))
    .bind(HISTORY)
    .execute(&ctx.pool)
    .await?;

    worker.worker().close(100).await?;
    shutdown.cancel();
    task.await??;
    producers.close().await;
    consumers.close().await;
    ctx.obliterate(&queue).await?;
    sqlx::query(&format!("DELETE FROM {schema}.outbox WHERE topic <> $1"))
        .bind(HISTORY)
        .execute(&ctx.pool)
        .await?;
    Ok((timeline.measure(), replayed as u64))
}
