//! The relay's side of a drain row: a fresh schema pre-filled with
//! `--events` rows, an in-process relay publishing them through a sink, timed
//! from the moment it owns every partition until every row is published.

use super::{BODY, EVENT};
use crate::{cpu, BenchError, Ctx};
use postbox::migrate::WakeUp;
use postbox_relay::{Config, Destination, Relay, SentRows};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

/// Pre-fill a fresh schema, start a relay publishing to `sink` that marks
/// or deletes (`sent`) what it delivered, time until every row is published.
pub(super) async fn drain(
    ctx: &Ctx,
    sink: Arc<dyn Destination>,
    topic: &str,
    sent: SentRows,
) -> Result<cpu::Measured, BenchError> {
    drain_beside(ctx, sink, topic, sent, None).await
}

/// [`drain`] with `scheduled` events waiting in `outbox_scheduled` beside the
/// backlog, due from a minute ahead over the next day (none during the drain),
/// then a CHECKPOINT (with `Some(0)` too), so that writing them is not what
/// the drain measures.
pub(crate) async fn drain_beside(
    ctx: &Ctx,
    sink: Arc<dyn Destination>,
    topic: &str,
    sent: SentRows,
    scheduled: Option<u64>,
) -> Result<cpu::Measured, BenchError> {
    let p = &ctx.p;
    let schema = ctx.schema("drain", WakeUp::Off).await?;
    if let Some(scheduled) = scheduled {
        sqlx::query(&format!(
            "INSERT INTO {schema}.outbox_scheduled (topic, event, key, payload, deliver_at)
             SELECT $1, $2, 'key-' || (g % $3), jsonb_build_object('n', g, 'body', $4::text),
                    now() + make_interval(secs => 60 + g * 86400.0 / $5)
               FROM generate_series(1, $5) g"
        ))
        .bind(topic)
        .bind(EVENT)
        .bind(p.keys)
        .bind(BODY)
        .bind(scheduled as i64)
        .execute(&ctx.pool)
        .await?;
        sqlx::raw_sql(&format!("VACUUM ANALYZE {schema}.outbox_scheduled"))
            .execute(&ctx.pool)
            .await?;
    }
    sqlx::query(&format!(
        "INSERT INTO {schema}.outbox (topic, event, key, payload)
         SELECT $1, $2, 'key-' || (g % $3), jsonb_build_object('n', g, 'body', $4::text)
           FROM generate_series(1, $5) g"
    ))
    .bind(topic)
    .bind(EVENT)
    .bind(p.keys)
    .bind(BODY)
    .bind(p.events)
    .execute(&ctx.pool)
    .await?;
    // Fresh statistics and visibility map, as a table in steady use would have.
    sqlx::raw_sql(&format!("VACUUM ANALYZE {schema}.outbox"))
        .execute(&ctx.pool)
        .await?;
    if scheduled.is_some() {
        // Needs a superuser or pg_checkpoint; without, the figures are noisier.
        if let Err(e) = sqlx::raw_sql("CHECKPOINT").execute(&ctx.pool).await {
            eprintln!("warning: CHECKPOINT refused ({e}): the drains may overlap a checkpoint");
        }
        // And the kernel's write-back of what the checkpoint wrote (a local server).
        let _ = tokio::process::Command::new("sync").status().await;
    }

    let shutdown = CancellationToken::new();
    let config = Config {
        sent,
        ..ctx.relay_config(&schema, Duration::from_millis(50))
    };
    let relay = Relay::new(config, sink)?;
    let stats = relay.stats();
    let started = Instant::now();
    let task = tokio::spawn(relay.run(shutdown.clone()));
    // The clock starts once the relay owns every partition (its start-up and
    // rebalancing are not the drain rate); rows published before do not count.
    let mut from: Option<(cpu::Window, u64)> = None;
    let whole = cpu::Window::start();
    let mut timeline = Timeline {
        rss_before: rss_bytes(),
        ..Timeline::default()
    };
    loop {
        let s = stats.snapshot();
        let now = Instant::now();
        timeline.see(now - started, s.published);
        timeline.rss_peak = timeline.rss_peak.max(rss_bytes());
        if from.is_none() && s.owned_partitions >= i64::from(postbox::PARTITIONS) {
            from = Some((cpu::Window::start(), s.published));
            timeline.owned_all = Some(now - started);
        }
        if s.published >= p.events as u64 {
            break;
        }
        if task.is_finished() {
            return Err("the relay stopped during the drain benchmark".into());
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    // A backlog drained before the relay owned everything: timed from its start.
    let (window, before) = from.unwrap_or((whole, 0));
    println!("         {timeline}");
    let measured = window.finish(p.events as u64 - before);
    shutdown.cancel();
    task.await??;
    ctx.drop_schema(&schema).await?;
    Ok(measured)
}

/// When, after the relay started, it owned every partition and published its
/// first event, and the longest time no event was published during the drain:
/// a stall (partitions without an owner, a missed wake-up) shows here. Also
/// this process's resident memory before and at its peak during the drain,
/// which must not grow with the backlog.
#[derive(Default)]
struct Timeline {
    owned_all: Option<Duration>,
    first_publish: Option<Duration>,
    last_progress: Option<(Duration, u64)>,
    longest_pause: Duration,
    rss_before: u64,
    rss_peak: u64,
}

/// This process's resident set size (Linux; 0 where `/proc` is missing).
fn rss_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let kib = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
        .unwrap_or(0);
    kib * 1024
}

impl Timeline {
    fn see(&mut self, at: Duration, published: u64) {
        if published == 0 {
            return;
        }
        self.first_publish.get_or_insert(at);
        match self.last_progress {
            Some((_, n)) if n == published => {}
            Some((since, _)) => {
                self.longest_pause = self.longest_pause.max(at - since);
                self.last_progress = Some((at, published));
            }
            None => self.last_progress = Some((at, published)),
        }
    }
}

impl std::fmt::Display for Timeline {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let ms = |d: Option<Duration>| match d {
            Some(d) => format!("{:.0} ms", d.as_secs_f64() * 1000.0),
            None => "never".into(),
        };
        write!(
            f,
            "all partitions owned at {}, first event published at {}, longest pause in publishing {}, memory {} MiB before, {} MiB at the peak",
            ms(self.owned_all),
            ms(self.first_publish),
            ms(Some(self.longest_pause)),
            self.rss_before >> 20,
            self.rss_peak >> 20
        )
    }
}
