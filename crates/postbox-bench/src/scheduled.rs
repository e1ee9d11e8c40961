//! Scheduled events (`Event::deliver_at`), two figures:
//! - the drain of `--events` current events with `--scheduled-events` waiting
//!   to be due over the next day, against the same drain with none scheduled,
//!   in the same run (what scheduling costs the delivery of current events);
//! - how late scheduled events are delivered: `--scheduled-due` events due
//!   over the next five seconds, through a relay and a sink that acknowledges
//!   at once and notes when each reached it; lateness is that instant minus
//!   the event's `deliver_at` (one host, one clock), and an event published
//!   before its time fails the benchmark.

use super::drain::relayed::drain_beside;
use super::parts::{relay_ready, until_none, NullSink};
use super::report::{LatencyRow, LatencySection, Section, Spread};
use super::Ctx;
use crate::BenchError;
use chrono::{DateTime, Utc};
use postbox::migrate::WakeUp;
use postbox_relay::{Destination, OutboxEvent, Outcome, SinkError};
use postbox_relay::{Relay, SentRows};
use std::sync::Arc;
use std::sync::Mutex;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

const NONE: &str = "relay → null sink, nothing scheduled";

pub async fn run(ctx: &Ctx) -> Result<(Section, LatencySection), BenchError> {
    let p = &ctx.p;
    let with = format!(
        "relay → null sink, {} scheduled over the next day",
        p.scheduled_events
    );
    println!(
        "Scheduled events: drain of {} events beside {} scheduled ones, {} cores",
        p.events, p.scheduled_events, ctx.cores
    );
    let (mut none, mut some) = (Vec::new(), Vec::new());
    for rep in 1..=p.reps {
        for (scheduled, what, rates) in [
            (0, NONE, &mut none),
            (p.scheduled_events, with.as_str(), &mut some),
        ] {
            let m = drain_beside(
                ctx,
                Arc::new(NullSink),
                "bench",
                SentRows::Mark,
                Some(scheduled),
            )
            .await?;
            println!("  rep {rep}: {what:<52} {:>9.0} events/s", m.rate);
            rates.push(m.rate);
        }
    }
    let mut drain = Section::new(
        &format!(
            "Relay drain beside scheduled events: {} events, batch {}, {} workers",
            p.events, p.relay.batch_size, p.relay.workers
        ),
        "events/s",
    );
    drain.baseline(NONE, none);
    drain.measured(&with, some, &[NONE]);
    drain.print();

    let mut runs = Vec::new();
    for rep in 1..=p.reps {
        let m = lateness(ctx).await?;
        println!(
            "  rep {rep}: {} events due over 5 s: late by p50 {:.1}  p99 {:.1}  max {:.1} ms",
            p.scheduled_due, m.0, m.2, m.3
        );
        runs.push(m);
    }
    let col = |f: fn(&(f64, f64, f64, f64)) -> f64| Spread::new(runs.iter().map(f).collect());
    let late = LatencySection {
        title: "How late scheduled events are delivered (sent_at − deliver_at)".into(),
        ratio_to: "—".into(),
        rows: vec![LatencyRow {
            variant: format!("{} due over 5 s, relay → null sink", p.scheduled_due),
            baseline: true,
            rate: p.scheduled_due / 5,
            sent: p.scheduled_due * p.reps as u64,
            received: p.scheduled_due * p.reps as u64,
            p50_ratio: None,
            p99_ratio: None,
            p50_ms: col(|m| m.0),
            p95_ms: col(|m| m.1),
            p99_ms: col(|m| m.2),
            max_ms: col(|m| m.3),
        }],
    };
    late.print();
    Ok((drain, late))
}

/// Acknowledges at once, noting each event's lateness: the instant it was
/// published minus its due time (the outbox row of a moved event has
/// `created_at` = its `deliver_at`).
#[derive(Default)]
struct Stamps(Mutex<Vec<f64>>);

#[async_trait::async_trait]
impl Destination for Stamps {
    fn name(&self) -> &'static str {
        "stamps"
    }
    async fn check(&self) -> Result<(), SinkError> {
        Ok(())
    }
    async fn publish(&self, batch: &[OutboxEvent], _: tokio::time::Instant) -> Vec<Outcome> {
        let now: DateTime<Utc> = Utc::now();
        let mut late = self.0.lock().unwrap();
        for e in batch {
            late.push((now - e.created_at).num_microseconds().unwrap_or(i64::MAX) as f64 / 1000.0);
        }
        batch.iter().map(|_| Outcome::Delivered).collect()
    }
}

/// (p50, p95, p99, max) of `sent_at - deliver_at` in ms over `--scheduled-due`
/// events due over the next five seconds; an error if any went early.
async fn lateness(ctx: &Ctx) -> Result<(f64, f64, f64, f64), BenchError> {
    let p = &ctx.p;
    let schema = ctx.schema("scheduled", WakeUp::Adaptive).await?;
    let stamps = Arc::new(Stamps::default());
    let relay = Relay::new(
        ctx.relay_config(&schema, Duration::from_secs(1)),
        stamps.clone(),
    )?;
    let stats = relay.stats();
    let shutdown = CancellationToken::new();
    let task = tokio::spawn(relay.run(shutdown.clone()));
    relay_ready(&stats).await?;
    sqlx::query(&format!(
        "INSERT INTO {schema}.outbox_scheduled (topic, event, key, payload, deliver_at)
         SELECT 'bench', 'bench.event', 'key-' || (g % 64), '{{}}',
                now() + make_interval(secs => 1 + g * 5.0 / $1)
           FROM generate_series(1, $1) g"
    ))
    .bind(p.scheduled_due as i64)
    .execute(&ctx.pool)
    .await?;
    until_none(
        &ctx.pool,
        &format!(
            "SELECT (SELECT count(*) FROM {schema}.outbox_scheduled)
                  + (SELECT count(*) FROM {schema}.outbox WHERE sent_at IS NULL)"
        ),
        "scheduled events not delivered",
    )
    .await?;
    let mut late = std::mem::take(&mut *stamps.0.lock().unwrap());
    late.sort_by(f64::total_cmp);
    if late.len() as u64 != p.scheduled_due {
        return Err(format!(
            "{} of {} scheduled events published",
            late.len(),
            p.scheduled_due
        )
        .into());
    }
    let early = late.iter().filter(|ms| **ms < 0.0).count();
    let pct = |q: f64| late[((q * late.len() as f64).ceil() as usize).clamp(1, late.len()) - 1];
    let (p50, p95, p99, max) = (pct(0.5), pct(0.95), pct(0.99), pct(1.0));
    shutdown.cancel();
    task.await??;
    ctx.drop_schema(&schema).await?;
    if early > 0 {
        return Err(format!("{early} scheduled events were sent before their time").into());
    }
    Ok((p50, p95, p99, max))
}
