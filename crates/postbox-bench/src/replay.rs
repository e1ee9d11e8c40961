//! Live events' latency while `postbox replay` sends history again, on every
//! sink of the drain table that can run (one row per broker): a schema holds
//! `--replay-events` sent rows of a history topic (what a relay with
//! `sent = "mark"` retains); producers send live events at `--rate` over
//! `--keys` keys through one relay, which publishes live and replayed events
//! to two destinations of the same broker (a route for the history topic),
//! while the `postbox` binary replays the history at each `--replay-rates`
//! pace. Latency is the live event's wait in the outbox: producer commit →
//! the relay's mark after the broker acknowledged it (`sent_at - created_at`),
//! which is where a replay competes with live events. The baseline is the
//! same relay, broker and live load with no replay, in the same run.
//!
//! Each window lasts `--duration`; the replay is interrupted at its end
//! (SIGINT, as an operator would) and the next pace replays from the start.

use super::drain::broker::{Broker, Opened};
use super::drain::cases::{self, Case};
use super::latency::{Measure, Timeline};
use super::parts::{pool, until_none};
use super::report::{LatencyRow, LatencySection, Spread};
use super::Ctx;
use crate::args::ReplayPace;
use crate::BenchError;
use postbox::migrate::WakeUp;
use postbox::{Outbox, SchemaName};
use postbox_relay::{Relay, Router, TopicPattern};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

const PRODUCER_CONNECTIONS: u32 = 8;

/// The drain table's row of each broker measured here.
const SINKS: [&str; 7] = [
    "relay → BullMQ (transaction)",
    "relay → Redis Streams (script)",
    "relay → webhook",
    "relay → Kafka (transaction)",
    "relay → RabbitMQ",
    "relay → SQS FIFO",
    "relay → NATS JetStream",
];

pub async fn run(ctx: &Ctx) -> Result<LatencySection, BenchError> {
    let p = &ctx.p;
    let postbox = postbox_binary()?;
    println!(
        "Replay: {} live msg/s for {:?} while {} retained events are replayed, {} cores",
        p.rate, p.duration, p.replay_events, ctx.cores
    );
    let mut paces: Vec<Option<ReplayPace>> = vec![None];
    paces.extend(p.replay_rates.iter().copied().map(Some));
    let (cases, skipped): (Vec<Case>, Vec<Case>) = cases::table(p)
        .into_iter()
        .filter(|c| SINKS.contains(&c.name))
        .partition(|c| c.broker.is_ok());
    let mut rows = Vec::new();
    for (i, case) in cases.iter().enumerate() {
        let broker = case.broker.as_ref().map_err(|f| format!("no {f}"))?;
        let runs = sink(ctx, (case.name, &**broker), &postbox, &paces, i).await?;
        rows.extend(rows_of(case, &paces, &runs, p.rate));
    }
    let section = LatencySection {
        title: "Live events' wait in the outbox during a replay (commit → broker acknowledged)"
            .into(),
        ratio_to: "the same sink with no replay".into(),
        rows,
    };
    for case in skipped {
        if let Err(flag) = case.broker {
            println!("  skipped: {}: no {flag}", sink_name(case.name));
        }
    }
    section.print();
    Ok(section)
}

/// "BullMQ (transaction)" of "relay → BullMQ (transaction)".
fn sink_name(case: &str) -> &str {
    case.strip_prefix("relay → ").unwrap_or(case)
}

fn label(pace: Option<ReplayPace>) -> String {
    match pace {
        None => "no replay".into(),
        Some(ReplayPace::Auto) => "replay, --rate auto (the default)".into(),
        Some(ReplayPace::Fixed(0)) => "replay, --rate 0 (unlimited)".into(),
        Some(ReplayPace::Fixed(r)) => format!("replay, --rate {r}"),
    }
}

/// The rows of one sink: each pace over the repetitions, against no replay.
fn rows_of(
    case: &Case,
    paces: &[Option<ReplayPace>],
    runs: &[Vec<(Measure, u64)>],
    rate: u64,
) -> Vec<LatencyRow> {
    let mut rows: Vec<LatencyRow> = Vec::new();
    for (pace, m) in paces.iter().zip(runs) {
        let col = |f: fn(&Measure) -> f64| Spread::new(m.iter().map(|(m, _)| f(m)).collect());
        let (p50, p99) = (col(|m| m.2), col(|m| m.4));
        let base = rows.first().map(|b| (b.p50_ms.median, b.p99_ms.median));
        rows.push(LatencyRow {
            variant: format!("{}: {}", sink_name(case.name), label(*pace)),
            baseline: pace.is_none(),
            rate,
            sent: m.iter().map(|(m, _)| m.0).sum(),
            received: m.iter().map(|(m, _)| m.1).sum(),
            p50_ratio: base.map(|(b50, _)| p50.median / b50),
            p99_ratio: base.map(|(_, b99)| p99.median / b99),
            p50_ms: p50,
            p95_ms: col(|m| m.3),
            p99_ms: p99,
            max_ms: col(|m| m.5),
        });
    }
    rows
}

/// Every window of one sink: a schema with the history, two destinations of
/// the broker (live and history) and one relay for all of its windows.
async fn sink(
    ctx: &Ctx,
    (name, broker): (&str, &dyn Broker),
    postbox: &std::path::Path,
    paces: &[Option<ReplayPace>],
    i: usize,
) -> Result<Vec<Vec<(Measure, u64)>>, BenchError> {
    let p = &ctx.p;
    let schema = ctx.schema("replay", WakeUp::Adaptive).await?;
    let live = broker.open(ctx, &format!("replay-live-{i}")).await?;
    let history = broker.open(ctx, &format!("replay-history-{i}")).await?;
    let seeded = Instant::now();
    seed(ctx, &schema, &history.topic, p.replay_events).await?;
    println!(
        "  {} sent rows of topic {} written in {:.1} s",
        p.replay_events,
        history.topic,
        seeded.elapsed().as_secs_f64()
    );
    let router = Router::new(live.sink.clone())
        .route(TopicPattern::new(&history.topic), history.sink.clone());
    let relay = Relay::new(
        ctx.relay_config(&schema, Duration::from_secs(1)),
        Arc::new(router),
    )?;
    let stats = relay.stats();
    let shutdown = CancellationToken::new();
    let task = tokio::spawn(relay.run(shutdown.clone()));
    let measured = async {
        super::parts::relay_ready(&stats).await?;
        let mut runs: Vec<Vec<(Measure, u64)>> = vec![Vec::new(); paces.len()];
        for rep in 1..=p.reps {
            for (j, pace) in paces.iter().enumerate() {
                let w = Window {
                    schema: &schema,
                    live: &live.topic,
                    history: &history.topic,
                    pace: *pace,
                };
                let (m, replayed) = w.measure(ctx, postbox).await?;
                println!(
                    "  rep {rep}: {:<24} {:<34} p50 {:>7.1}  p99 {:>7.1}  max {:>7.1} ms  ({}/{} sent; {replayed} replayed, {:.0}/s)",
                    sink_name(name),
                    label(*pace),
                    m.2,
                    m.4,
                    m.5,
                    m.1,
                    m.0,
                    replayed as f64 / p.duration.as_secs_f64()
                );
                runs[j].push((m, replayed));
            }
        }
        Ok::<_, BenchError>(runs)
    }
    .await;
    shutdown.cancel();
    let stopped = task.await;
    for opened in [live, history] {
        close(opened).await;
    }
    ctx.drop_schema(&schema).await?;
    stopped??;
    measured
}

async fn close(opened: Opened<'_>) {
    let topic = opened.topic;
    if let Err(e) = opened.close.await {
        // Only bench messages are left behind.
        eprintln!("warning: cannot remove the bench's {topic}: {e}");
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

/// `n` sent rows of `topic` over 1,000 keys, with the bench's payload.
async fn seed(ctx: &Ctx, schema: &SchemaName, topic: &str, n: u64) -> Result<(), BenchError> {
    sqlx::query(&format!(
        "INSERT INTO {schema}.outbox (topic, event, key, payload, sent_at, xid)
         SELECT $1, $2, 'h-' || (i % 1000), jsonb_build_object('body', $3::text), now(), '1'
           FROM generate_series(1, $4::bigint) i"
    ))
    .bind(topic)
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

/// One window of one sink.
struct Window<'a> {
    schema: &'a SchemaName,
    live: &'a str,
    history: &'a str,
    pace: Option<ReplayPace>,
}

impl Window<'_> {
    /// Live events at `--rate` and, with a pace, a `postbox replay` of the
    /// history at that pace started with the window and interrupted at its
    /// end. Returns the live events' figures and how many events the replay
    /// made unsent again.
    async fn measure(
        &self,
        ctx: &Ctx,
        postbox: &std::path::Path,
    ) -> Result<(Measure, u64), BenchError> {
        let (p, schema) = (&ctx.p, self.schema);
        let n = ((p.rate as f64 * p.duration.as_secs_f64()).round() as usize).max(1);
        let producers = pool(ctx, PRODUCER_CONNECTIONS).await?;
        let outbox = Outbox::new(schema.as_str())?;
        let mut replay = match self.pace {
            None => None,
            Some(pace) => Some(
                tokio::process::Command::new(postbox)
                    .args(["replay", "--schema", schema.as_str(), "--since", "1d"])
                    .args([
                        "--topic",
                        self.history,
                        "--rate",
                        &pace.to_string(),
                        "--yes",
                    ])
                    .env("DATABASE_URL", &p.database_url)
                    .stdout(std::process::Stdio::null())
                    .stderr(std::process::Stdio::null())
                    .kill_on_drop(true)
                    .spawn()?,
            ),
        };
        let timeline = Arc::new(Timeline::new(n));
        let start_at = tokio::time::Instant::now();
        let keys = (p.rate, p.keys);
        super::parts::open_loop(&producers, &outbox, &timeline, self.live, keys, start_at, n)
            .await?;
        if let Some(child) = &mut replay {
            if let Some(pid) = child.id() {
                std::process::Command::new("kill")
                    .args(["-INT", &pid.to_string()])
                    .status()?;
            }
            child.wait().await?;
        }
        producers.close().await;
        // Every live and replayed row sent before it is measured and the next window.
        until_none(
            &ctx.pool,
            &format!("SELECT count(*) FROM {schema}.outbox WHERE sent_at IS NULL"),
            "unsent rows of the window",
        )
        .await?;
        let m = self.waits(ctx).await?;
        let replayed: i64 = sqlx::query_scalar(&format!(
            "WITH again AS (
                 UPDATE {schema}.outbox SET xid = '1' WHERE topic = $1 AND xid > '1' RETURNING 1
             ) SELECT count(*) FROM again"
        ))
        .bind(self.history)
        .fetch_one(&ctx.pool)
        .await?;
        sqlx::query(&format!("DELETE FROM {schema}.outbox WHERE topic = $1"))
            .bind(self.live)
            .execute(&ctx.pool)
            .await?;
        Ok((m, replayed as u64))
    }

    /// The live rows' wait, commit → marked sent, in ms.
    async fn waits(&self, ctx: &Ctx) -> Result<Measure, BenchError> {
        let schema = self.schema;
        let (sent, marked, p50, p95, p99, max): (i64, i64, f64, f64, f64, f64) =
            sqlx::query_as(&format!(
                "SELECT count(*), count(ms),
                        coalesce(percentile_cont(0.5) WITHIN GROUP (ORDER BY ms), 0),
                        coalesce(percentile_cont(0.95) WITHIN GROUP (ORDER BY ms), 0),
                        coalesce(percentile_cont(0.99) WITHIN GROUP (ORDER BY ms), 0),
                        coalesce(max(ms), 0)
                   FROM (SELECT extract(epoch FROM sent_at - created_at)::float8 * 1000 AS ms
                           FROM {schema}.outbox WHERE topic = $1) w"
            ))
            .bind(self.live)
            .fetch_one(&ctx.pool)
            .await?;
        Ok((sent as u64, marked as u64, p50, p95, p99, max))
    }
}
