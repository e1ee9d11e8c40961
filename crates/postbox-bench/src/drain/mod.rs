//! Relay drain: pre-filled events drained by an in-process relay into each
//! sink of the drain table ([`cases`]), events/s, next to the SQL-only
//! claim+mark rate (a sink that acknowledges at once: PostgreSQL and the
//! relay alone) and each case's raw rate (the same events through the same
//! sink without PostgreSQL, [`raw`]). [`relayed`] times the relay; one file
//! per broker readies its destinations.

pub(crate) mod broker;
mod bullmq;
pub(crate) mod cases;
mod kafka;
mod nats;
mod rabbitmq;
mod raw;
mod redis_streams;
pub(crate) mod relayed;
mod sqs;
mod webhook;

use super::cpu;
use super::report::Section;
use super::{Ctx, NullSink};
use crate::BenchError;
use cases::Case;
use postbox_relay::{Destination, SentRows};
use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::sync::Arc;

const SQL_ONLY: &str = "SQL-only claim+mark";
const SQL_ONLY_DELETE: &str = "SQL-only claim+delete (sent = delete)";
/// The event name and payload every row and raw message carries.
pub(super) const EVENT: &str = "bench.event";
pub(super) const BODY: &str = "hello from the bench";

pub async fn run(ctx: &Ctx) -> Result<Section, BenchError> {
    let p = &ctx.p;
    println!(
        "Relay drain: {} events over {} keys, batch {}, {} workers, {} cores",
        p.events, p.keys, p.relay.batch_size, p.relay.workers, ctx.cores
    );
    let (cases, skipped): (Vec<Case>, Vec<Case>) =
        cases::table(p).into_iter().partition(|c| c.broker.is_ok());
    let mut rates: HashMap<&str, Vec<f64>> = HashMap::new();
    let mut record = |rep: usize, what: &'static str, m: cpu::Measured| {
        println!("  rep {rep}: {what:<44} {:>9.0} events/s", m.rate);
        println!("         {}", m.cpu);
        rates.entry(what).or_default().push(m.rate);
    };
    for rep in 1..=p.reps {
        let r = relayed::drain(ctx, Arc::new(NullSink), "bench", SentRows::Mark).await?;
        record(rep, SQL_ONLY, r);
        let r = relayed::drain(ctx, Arc::new(NullSink), "bench", SentRows::Delete).await?;
        record(rep, SQL_ONLY_DELETE, r);
        let mut raw_done = HashSet::new();
        for (i, case) in cases.iter().enumerate() {
            let what = format!("drain-{i}-{rep}");
            let r = on_fresh_destination(ctx, case, &what, |sink, topic| async move {
                relayed::drain(ctx, sink, &topic, case.sent).await
            })
            .await?;
            record(rep, case.name, r);
            if let Some(raw) = case.raw.filter(|raw| raw_done.insert(*raw)) {
                let what = format!("raw-{i}-{rep}");
                let r = on_fresh_destination(ctx, case, &what, |sink, topic| async move {
                    raw::rate(ctx, sink, &topic).await
                })
                .await?;
                record(rep, raw, r);
            }
        }
    }

    let mut s = Section::new(
        &format!(
            "Relay drain: {} events, batch {}, {} workers",
            p.events, p.relay.batch_size, p.relay.workers
        ),
        "events/s",
    );
    let mut take = |what: &str| rates.remove(what).unwrap_or_default();
    s.baseline(SQL_ONLY, take(SQL_ONLY));
    s.baseline(SQL_ONLY_DELETE, take(SQL_ONLY_DELETE));
    for case in &cases {
        let sql_only = match case.sent {
            SentRows::Mark => SQL_ONLY,
            SentRows::Delete => SQL_ONLY_DELETE,
        };
        let mut against = vec![sql_only];
        if let Some(raw) = case.raw {
            // A raw row shared by several cases is printed before the first.
            if !s.rows.iter().any(|r| r.name == raw) {
                s.baseline(raw, take(raw));
            }
            against.push(raw);
        }
        s.measured(case.name, take(case.name), &against);
    }
    let mut missing: Vec<(&str, Vec<&str>)> = Vec::new();
    for case in &skipped {
        let Err(flag) = case.broker else { continue };
        match missing.iter_mut().find(|(f, _)| *f == flag) {
            Some((_, names)) => names.push(case.name),
            None => missing.push((flag, vec![case.name])),
        }
    }
    for (flag, names) in missing {
        let raw = if names.len() == 1 {
            "its raw row"
        } else {
            "their raw rows"
        };
        s.skipped
            .push(format!("{} and {raw}: no {flag}", names.join(", ")));
    }
    s.print();
    Ok(s)
}

/// Ready a destination of `case`'s broker, run `f` with its sink and topic,
/// and remove the destination whatever `f` returned.
async fn on_fresh_destination<F, Fut>(
    ctx: &Ctx,
    case: &Case,
    what: &str,
    f: F,
) -> Result<cpu::Measured, BenchError>
where
    F: FnOnce(Arc<dyn Destination>, String) -> Fut,
    Fut: Future<Output = Result<cpu::Measured, BenchError>>,
{
    let broker = case.broker.as_ref().map_err(|flag| format!("no {flag}"))?;
    let opened = broker.open(ctx, what).await?;
    let topic = opened.topic.clone();
    let measured = f(opened.sink, opened.topic).await;
    if let Err(e) = opened.close.await {
        // Only bench messages are left behind.
        eprintln!("warning: cannot remove the bench's {topic}: {e}");
    }
    measured
}
