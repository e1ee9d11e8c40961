//! What several scenarios measure with: a filler writing plain-SQL events
//! beside the chats, the lag of the consumers' outbox rows over a window (on
//! some partitions or all), the send → shown latency of chat messages from
//! the history, and which relay owns which partition, sampled.

use crate::history::{History, Kind};
use crate::latency::pct;
use crate::world::World;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::{Duration, Instant};

/// Writes plain-SQL events to the consumers' outbox until stopped.
pub struct Filler {
    task: tokio::task::JoinHandle<Result<u64, sqlx::Error>>,
    stop: tokio::sync::watch::Sender<bool>,
}

impl Filler {
    /// `rate` events per second on topic `topic`, `batch` to a statement,
    /// round-robin over the keys `k0`…`k<keys − 1>`.
    pub fn start(w: &World, topic: &'static str, keys: u64, rate: u64, batch: u64) -> Filler {
        let (pool, schema) = (w.admin.clone(), w.consumers.schema.clone());
        let (stop, mut stopped) = tokio::sync::watch::channel(false);
        let task = tokio::spawn(async move {
            let every = Duration::from_micros(1_000_000 * batch / rate);
            let mut tick = tokio::time::interval(every);
            let mut n = 0u64;
            loop {
                tokio::select! {
                    _ = tick.tick() => {}
                    _ = stopped.changed() => return Ok(n),
                }
                sqlx::query(&format!(
                    "INSERT INTO {schema}.outbox (topic, event, key, payload)
                     SELECT $1, 'filler', 'k' || ((($2::bigint) + g) % $4), '{{}}'
                       FROM generate_series(1, $3::bigint) g"
                ))
                .bind(topic)
                .bind(n as i64)
                .bind(batch as i64)
                .bind(keys as i64)
                .execute(&pool)
                .await?;
                n += batch;
            }
        });
        Filler { task, stop }
    }

    /// Stop after the statement in flight, if any, has committed: a statement
    /// cut off by an abort could commit after the checker looked. Returns
    /// how many events it wrote.
    pub async fn stop(self) -> Result<u64, chat::Error> {
        let _ = self.stop.send(true);
        Ok(self.task.await.map_err(|e| e.to_string())??)
    }
}

/// The server's clock, in seconds since the epoch.
pub async fn server_now(w: &World) -> Result<f64, sqlx::Error> {
    sqlx::query_scalar("SELECT extract(epoch FROM clock_timestamp())::float8")
        .fetch_one(&w.admin)
        .await
}

/// The lag of a window's events: `sent_at − created_at` (a row still
/// unsent counts with its age so far).
pub struct Lag {
    pub p99_ms: f64,
    pub max_ms: f64,
    pub events: i64,
    pub unsent: i64,
}

impl std::fmt::Display for Lag {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "p99 {:.0} ms, max {:.0} ms ({} events",
            self.p99_ms, self.max_ms, self.events
        )?;
        if self.unsent > 0 {
            write!(f, ", {} still unsent", self.unsent)?;
        }
        f.write_str(")")
    }
}

/// The lag of every event of the consumers' outbox created in `[from, to)`
/// (server time, seconds since the epoch), on `partitions` (all if None).
pub async fn outbox_lag(
    w: &World,
    from: f64,
    to: f64,
    partitions: Option<&[i16]>,
) -> Result<Lag, sqlx::Error> {
    let (p99_ms, max_ms, events, unsent): (f64, f64, i64, i64) = sqlx::query_as(&format!(
        "SELECT coalesce(percentile_cont(0.99) WITHIN GROUP (ORDER BY lag), 0)::float8 * 1000,
                coalesce(max(lag), 0)::float8 * 1000,
                count(*),
                count(*) FILTER (WHERE NOT sent)
           FROM (SELECT extract(epoch FROM coalesce(sent_at, clock_timestamp()) - created_at) AS lag,
                        sent_at IS NOT NULL AS sent
                   FROM {}.outbox
                  WHERE created_at >= to_timestamp($1) AND created_at < to_timestamp($2)
                    AND ($3::int2[] IS NULL OR partition_id = ANY($3))) t",
        w.consumers.schema
    ))
    .bind(from)
    .bind(to)
    .bind(partitions)
    .fetch_one(&w.admin)
    .await?;
    Ok(Lag {
        p99_ms,
        max_ms,
        events,
        unsent,
    })
}

/// Events of the consumers' outbox created before `to` (server time) and not sent yet.
pub async fn unsent_before(w: &World, to: f64) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar(&format!(
        "SELECT count(*) FROM {}.outbox WHERE sent_at IS NULL AND created_at < to_timestamp($1)",
        w.consumers.schema
    ))
    .bind(to)
    .fetch_one(&w.admin)
    .await
}

/// The chats whose key (`chat:<id>`) falls in `partitions`, among those the
/// consumers' outbox has events of.
pub async fn chats_on(w: &World, partitions: &[i16]) -> Result<BTreeSet<i64>, sqlx::Error> {
    let chats: Vec<i64> = sqlx::query_scalar(&format!(
        "SELECT DISTINCT substr(key, 6)::int8 FROM {}.outbox
          WHERE key LIKE 'chat:%' AND partition_id = ANY($1)",
        w.consumers.schema
    ))
    .bind(partitions)
    .fetch_all(&w.admin)
    .await?;
    Ok(chats.into_iter().collect())
}

/// Send → first shown (ms) of the messages of `chats` (all if None) whose
/// sending began in `[from, to)` on the history's clock, sorted.
pub fn chat_latencies(h: &History, chats: Option<&BTreeSet<i64>>, from: f64, to: f64) -> Vec<f64> {
    let mut sending = HashMap::new();
    let mut out = Vec::new();
    for e in h.entries() {
        match e.kind {
            Kind::Sending(m)
                if chats.is_none_or(|c| c.contains(&m.chat)) && e.at >= from && e.at < to =>
            {
                sending.insert(m, e.at);
            }
            Kind::Shown(m) => {
                if let Some(t) = sending.remove(&m) {
                    out.push((e.at - t) * 1000.0);
                }
            }
            _ => {}
        }
    }
    out.sort_by(|a, b| a.total_cmp(b));
    out
}

/// `p99 … ms, max … ms (n messages)` of sorted latencies.
pub fn describe(sorted: &[f64]) -> String {
    if sorted.is_empty() {
        return "no messages".into();
    }
    format!(
        "p99 {:.0} ms, max {:.0} ms ({} messages)",
        pct(sorted, 99.0),
        sorted[sorted.len() - 1],
        sorted.len()
    )
}

/// Partition → the process id of the relay whose session holds its lock.
pub type Owners = BTreeMap<i16, u32>;

/// Who owns which partition of the consumers' schema now (pg_locks, as
/// `postbox status` reads it: crates/postbox/sql/queries/status_relays.sql).
pub async fn owners(w: &World) -> Result<Owners, sqlx::Error> {
    owners_of(&w.admin, &w.consumers.schema).await
}

async fn owners_of(pool: &sqlx::PgPool, schema: &str) -> Result<Owners, sqlx::Error> {
    let rows: Vec<(i16, i64)> = sqlx::query_as(
        "SELECT l.objid::int4::int2, split_part(a.application_name, ':', 2)::int8
           FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
          WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 2
            AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
            AND l.classid::int4 = hashtext('postbox.partition.' || $1)
            AND a.application_name LIKE 'postbox-relay:%'",
    )
    .bind(schema)
    .fetch_all(pool)
    .await?;
    Ok(rows.into_iter().map(|(p, pid)| (p, pid as u32)).collect())
}

/// How many partitions relay process `pid` owns in `o`.
pub fn owned_by(o: &Owners, pid: u32) -> usize {
    o.values().filter(|p| **p == pid).count()
}

/// Ownership sampled on the history's clock: `(at, owners)`.
pub type Samples = Vec<(f64, Owners)>;

/// Samples who owns which partition every `every` until stopped.
pub struct Sampler {
    task: tokio::task::JoinHandle<Samples>,
    stop: tokio::sync::watch::Sender<bool>,
}

impl Sampler {
    pub fn start(w: &World, every: Duration) -> Sampler {
        let (pool, schema, h) = (
            w.admin.clone(),
            w.consumers.schema.clone(),
            w.history.clone(),
        );
        let (stop, mut stopped) = tokio::sync::watch::channel(false);
        let task = tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let mut samples = Samples::new();
            loop {
                tokio::select! {
                    _ = tick.tick() => {}
                    _ = stopped.changed() => return samples,
                }
                // A sample the server did not answer is left out.
                if let Ok(o) = owners_of(&pool, &schema).await {
                    samples.push((h.elapsed(), o));
                }
            }
        });
        Sampler { task, stop }
    }

    pub async fn stop(self) -> Samples {
        let _ = self.stop.send(true);
        self.task.await.unwrap_or_default()
    }
}

/// A partition changing owner: `(at, partition, before, after)`, None for no owner.
pub type Change = (f64, i16, Option<u32>, Option<u32>);

/// Owner changes between consecutive samples.
pub fn changes(samples: &[(f64, Owners)]) -> Vec<Change> {
    let mut out = Vec::new();
    for pair in samples.windows(2) {
        let ((_, a), (at, b)) = (&pair[0], &pair[1]);
        for p in 0..PARTITIONS {
            let (x, y) = (a.get(&p).copied(), b.get(&p).copied());
            if x != y {
                out.push((*at, p, x, y));
            }
        }
    }
    out
}

/// The ordering partitions of a schema (0..63).
pub const PARTITIONS: i16 = 64;

/// Wait until the relays `pids` own every partition between them, each at
/// least one; returns how many each owns.
pub async fn settled(
    w: &World,
    pids: &[u32],
    timeout: Duration,
) -> Result<Vec<usize>, chat::Error> {
    let deadline = Instant::now() + timeout;
    loop {
        let o = owners(w).await?;
        let each: Vec<usize> = pids.iter().map(|p| owned_by(&o, *p)).collect();
        if each.iter().sum::<usize>() == PARTITIONS as usize && each.iter().all(|n| *n > 0) {
            return Ok(each);
        }
        if Instant::now() > deadline {
            return Err(format!(
                "the relays did not share the {PARTITIONS} partitions within {timeout:?} (they own {each:?})"
            )
            .into());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The relays' own records in `outbox_relays` (what each says of its
/// health), one line each; the error, if the table cannot be read.
pub async fn relay_records(w: &World) -> String {
    // instance, taking_partitions, owned_partitions, seconds unavailable
    type Record = (String, bool, i32, Option<f64>);
    let rows: Result<Vec<Record>, _> = sqlx::query_as(&format!(
        "SELECT instance, taking_partitions, owned_partitions,
                extract(epoch FROM clock_timestamp() - unavailable_since)::float8
           FROM {}.outbox_relays ORDER BY instance",
        w.consumers.schema
    ))
    .fetch_all(&w.admin)
    .await;
    match rows {
        Ok(rows) => rows
            .into_iter()
            .map(|(instance, taking, owned, since)| {
                format!(
                    "  {instance}: taking partitions {taking}, owns {owned}, {}\n",
                    since.map_or("every sink publishing".to_owned(), |s| format!(
                        "unavailable for {s:.1} s"
                    ))
                )
            })
            .collect(),
        Err(e) => format!("  outbox_relays not readable: {e}\n"),
    }
}
