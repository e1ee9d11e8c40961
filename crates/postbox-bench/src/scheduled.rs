//! Scheduled events (`Event::deliver_at`), two figures:
//! - the drain of `--events` current events with `--scheduled-events` waiting
//!   to be due over the next day, against the same drain with none scheduled,
//!   in the same run (what scheduling costs the delivery of current events);
//! - how late scheduled events are delivered: `--scheduled-due` events due
//!   over the next five seconds, through a relay and a sink that acknowledges
//!   at once; lateness is `sent_at - deliver_at` as PostgreSQL's clock tells
//!   it, and an event sent before its time fails the benchmark.

use super::drain::relayed::drain_beside;
use super::parts::{relay_ready, NullSink};
use super::report::{LatencyRow, LatencySection, Section, Spread};
use super::Ctx;
use crate::BenchError;
use postbox::migrate::WakeUp;
use postbox_relay::{Relay, SentRows};
use std::sync::Arc;
use std::time::{Duration, Instant};
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
            let m =
                drain_beside(ctx, Arc::new(NullSink), "bench", SentRows::Mark, scheduled).await?;
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
            p50_ms: col(|m| m.0),
            p95_ms: col(|m| m.1),
            p99_ms: col(|m| m.2),
            max_ms: col(|m| m.3),
        }],
    };
    late.print();
    Ok((drain, late))
}

/// (p50, p95, p99, max) of `sent_at - deliver_at` in ms over `--scheduled-due`
/// events due over the next five seconds; an error if any went early.
async fn lateness(ctx: &Ctx) -> Result<(f64, f64, f64, f64), BenchError> {
    let p = &ctx.p;
    let schema = ctx.schema("scheduled", WakeUp::Adaptive).await?;
    let relay = Relay::new(
        ctx.relay_config(&schema, Duration::from_secs(1)),
        Arc::new(NullSink),
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
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let left: i64 = sqlx::query_scalar(&format!(
            "SELECT (SELECT count(*) FROM {schema}.outbox_scheduled)
                  + (SELECT count(*) FROM {schema}.outbox WHERE sent_at IS NULL)"
        ))
        .fetch_one(&ctx.pool)
        .await?;
        if left == 0 {
            break;
        }
        if Instant::now() > deadline {
            return Err(format!("{left} scheduled events not delivered within 60 s").into());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // created_at is the deliver_at of a moved event.
    let (early, p50, p95, p99, max): (i64, f64, f64, f64, f64) = sqlx::query_as(&format!(
        "SELECT count(*) FILTER (WHERE sent_at < created_at),
                percentile_cont(0.5) WITHIN GROUP (ORDER BY ms),
                percentile_cont(0.95) WITHIN GROUP (ORDER BY ms),
                percentile_cont(0.99) WITHIN GROUP (ORDER BY ms),
                max(ms)
           FROM (SELECT sent_at, created_at,
                        extract(epoch FROM sent_at - created_at)::float8 * 1000 AS ms
                   FROM {schema}.outbox) l"
    ))
    .fetch_one(&ctx.pool)
    .await?;
    shutdown.cancel();
    task.await??;
    ctx.drop_schema(&schema).await?;
    if early > 0 {
        return Err(format!("{early} scheduled events were sent before their time").into());
    }
    Ok((p50, p95, p99, max))
}
