//! Long transactions against the relay's read path: `long-snapshot` (a
//! read-only snapshot held, as pg_dump or an analytics query holds one) and
//! `idle-writer` (a transaction that wrote an outbox row and sits idle, its
//! xid holding the horizon). Beside the chats, a filler writes plain-SQL
//! events at `FILLER_RATE` on 64 keys; every sent row stays behind as a dead
//! index entry VACUUM may not remove while the transaction is open. The
//! scenario prints the filler's lag p99 (claim time − commit time) and the
//! relay's CPU per 1,000 events before and during the hold.

use super::measure::{server_now, Filler};
use super::{Run, Scenario};
use crate::world::World;
use std::time::{Duration, Instant};

pub struct LongSnapshot;

#[async_trait::async_trait]
impl Scenario for LongSnapshot {
    fn name(&self) -> &'static str {
        "long-snapshot"
    }

    fn about(&self) -> &'static str {
        "a repeatable-read snapshot held (as pg_dump holds one) while a filler writes 1,000 events/s beside the chats; the relay's lag and CPU per event must not grow with the dead rows it keeps (--hold, default 30 s)"
    }

    async fn faults(&self, run: &mut Run) -> Result<(), chat::Error> {
        run.at(0.5).await;
        run.ok &= hold_beside_filler(&run.w, false, run.hold).await?;
        Ok(())
    }
}

pub struct IdleWriter;

#[async_trait::async_trait]
impl Scenario for IdleWriter {
    fn name(&self) -> &'static str {
        "idle-writer"
    }

    fn about(&self) -> &'static str {
        "a transaction writes an outbox row and sits idle in transaction, its xid holding the horizon, while a filler writes 1,000 events/s beside the chats; the others' events keep flowing, its own arrives when it commits (--hold, default 30 s)"
    }

    async fn faults(&self, run: &mut Run) -> Result<(), chat::Error> {
        run.at(0.5).await;
        run.ok &= hold_beside_filler(&run.w, true, run.hold).await?;
        Ok(())
    }
}

/// Filler events per second, written `FILLER_BATCH` to a statement.
const FILLER_RATE: u64 = 1000;
const FILLER_BATCH: u64 = 4;
const FILLER_TOPIC: &str = "horizon-filler";
/// The bound on the filler's lag p99 during the hold for a clean verdict.
const LAG_BOUND_MS: f64 = 1000.0;

/// Lag p99 (ms) of the filler rows written in `[from, to)` (server time), and
/// how many were sent.
async fn lag(w: &World, from: f64, to: f64) -> Result<(f64, i64), sqlx::Error> {
    sqlx::query_as(&format!(
        "SELECT coalesce(percentile_cont(0.99) WITHIN GROUP (
                    ORDER BY extract(epoch FROM coalesce(sent_at, now()) - created_at)) * 1000, 0)::float8,
                count(*) FILTER (WHERE sent_at IS NOT NULL)
           FROM {}.outbox
          WHERE topic = $1 AND created_at >= to_timestamp($2) AND created_at < to_timestamp($3)",
        w.consumers.schema
    ))
    .bind(FILLER_TOPIC)
    .bind(from)
    .bind(to)
    .fetch_one(&w.admin)
    .await
}

/// Filler rows written before `to` (server time) and not sent yet.
async fn unsent_before(w: &World, to: f64) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar(&format!(
        "SELECT count(*) FROM {}.outbox
          WHERE topic = $1 AND sent_at IS NULL AND created_at < to_timestamp($2)",
        w.consumers.schema
    ))
    .bind(FILLER_TOPIC)
    .bind(to)
    .fetch_one(&w.admin)
    .await
}

/// CPU time (user + system) of process `pid` so far.
fn cpu(pid: u32) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the command name (which may hold spaces): utime, stime are 14 and 15.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<u64> = rest
        .split_whitespace()
        .skip(11)
        .take(2)
        .filter_map(|x| x.parse().ok())
        .collect();
    let ticks = f.iter().sum::<u64>();
    // USER_HZ is 100 on Linux.
    Duration::from_millis(ticks * 10)
}

/// One measured window: lag p99 and the relay's CPU per 1,000 events.
struct Window {
    lag_p99_ms: f64,
    cpu_per_1000_ms: f64,
}

async fn window(w: &World, pid: u32, length: Duration) -> Result<Window, sqlx::Error> {
    let (from, cpu0) = (server_now(w).await?, cpu(pid));
    tokio::time::sleep(length).await;
    let (to, cpu1) = (server_now(w).await?, cpu(pid));
    // The window's last rows claimed (at most 1.5 s: a row still unsent then
    // counts with its age so far).
    let deadline = Instant::now() + Duration::from_millis(1500);
    while unsent_before(w, to).await? > 0 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (lag_p99_ms, sent) = lag(w, from, to).await?;
    let used = (cpu1 - cpu0).as_secs_f64() * 1000.0;
    Ok(Window {
        lag_p99_ms,
        cpu_per_1000_ms: used * 1000.0 / sent.max(1) as f64,
    })
}

/// Run the hold beside the chats' load; true if the lag stayed in bounds.
async fn hold_beside_filler(
    w: &World,
    idle_writer: bool,
    hold: Duration,
) -> Result<bool, chat::Error> {
    let h = w.history.clone();
    let pid = w.consumers.relays[0].pid().ok_or("relay not running")?;
    let filler = Filler::start(w, FILLER_TOPIC, 64, FILLER_RATE, FILLER_BATCH);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let before = window(w, pid, Duration::from_secs(5)).await?;

    let mut holder = w.admin.begin().await?;
    if idle_writer {
        sqlx::query(&format!(
            "INSERT INTO {}.outbox (topic, event, key, payload) VALUES ($1, 'idle-writer', 'idle', '{{}}')",
            w.consumers.schema
        ))
        .bind(FILLER_TOPIC)
        .execute(&mut *holder)
        .await?;
        h.harness(
            "postgres",
            "a transaction wrote an outbox row and sits idle",
        );
    } else {
        sqlx::query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            .execute(&mut *holder)
            .await?;
        sqlx::query(&format!(
            "SELECT count(*) FROM {}.outbox",
            w.consumers.schema
        ))
        .execute(&mut *holder)
        .await?;
        h.harness("postgres", "a repeatable-read snapshot is held");
    }
    let held = Instant::now();
    // The second half of the hold: the dead entries are there by then.
    tokio::time::sleep(hold / 2).await;
    let during = window(w, pid, hold / 2 - Duration::from_millis(1500).min(hold / 2)).await?;
    let dead: i64 = sqlx::query_scalar(
        "SELECT coalesce(sum(n_dead_tup), 0)::bigint FROM pg_stat_user_tables
          WHERE schemaname = $1 AND relname = 'outbox'",
    )
    .bind(&w.consumers.schema)
    .fetch_one(&w.admin)
    .await?;
    holder.commit().await?;
    h.harness(
        "postgres",
        format!("the transaction ended after {:.0?}", held.elapsed()),
    );
    filler.stop().await?;
    println!(
        "{}: before the hold: lag p99 {:.0} ms, relay CPU {:.1} ms per 1,000 events; \
         the last half of a {} s hold: lag p99 {:.0} ms, relay CPU {:.1} ms per 1,000 events \
         ({:.2}× before); dead tuples in the outbox: {dead}",
        if idle_writer {
            "idle-writer"
        } else {
            "long-snapshot"
        },
        before.lag_p99_ms,
        before.cpu_per_1000_ms,
        hold.as_secs(),
        during.lag_p99_ms,
        during.cpu_per_1000_ms,
        during.cpu_per_1000_ms / before.cpu_per_1000_ms.max(0.001),
    );
    Ok(during.lag_p99_ms <= LAG_BOUND_MS)
}
