//! Per schema: what waits in the outbox, what is dead-lettered, and which
//! relay instances own which partitions (`postbox status`, the console's
//! overview and relays, `GET /api/v1/schemas/{schema}`). Read-only.

use chrono::{DateTime, Utc};
use postbox::sql::{statement_as, Queries};
use postbox::{SchemaName, PARTITIONS};
use serde::Serialize;
use sqlx::{Connection, PgConnection};
use std::collections::BTreeMap;

mod relays;
use relays::{instance_of, name_matches};
pub use relays::{RelayHealth, RelayState, SinkHealth};

#[derive(Serialize)]
pub struct SchemaStatus {
    pub schema: String,
    /// How relays read this outbox: `position` (each claim starts where the
    /// last one ended, migration 0010) or `head` (each claim reads every
    /// partition from its first unsent row; the schema needs `postbox
    /// migrate`).
    pub read_path: &'static str,
    /// How producers wake the relays, as installed on the outbox: `adaptive`,
    /// `statement`, `logical` or `off` (`postbox migrate --notify` changes it).
    pub wake_up: &'static str,
    /// Unsent rows (all topics).
    pub pending: i64,
    /// Age of the oldest unsent row, in seconds (null when none).
    pub oldest_pending_age_seconds: Option<f64>,
    /// Unsent rows waiting out a retry backoff (next_attempt_at in the future).
    pub retrying: i64,
    pub dead_letters: i64,
    /// The consumers' dead letters (`postbox inbox-dlq`), all consumers.
    pub consumer_dead_letters: i64,
    /// Scheduled events waiting to be due (`postbox scheduled list`).
    pub scheduled: i64,
    /// Seconds until the next scheduled event is due (null when none waits;
    /// 0 or less when one is due and a relay has yet to move it).
    pub next_scheduled_in_seconds: Option<f64>,
    pub topics: Vec<TopicStatus>,
    pub consumers: Vec<ConsumerStatus>,
    pub relays: Vec<Instance>,
    /// Relays that own partitions while a sink of theirs cannot publish:
    /// their keys wait (see each relay's `summary`).
    pub relays_cannot_publish: usize,
    /// Relays whose health record stopped being renewed.
    pub relays_stale: usize,
    pub partitions_owned: usize,
    /// Partitions no relay session owns right now, as ranges ("" when none).
    pub partitions_unowned: String,
}

#[derive(sqlx::FromRow, Serialize)]
pub struct TopicStatus {
    pub topic: String,
    pub pending: i64,
    pub oldest_pending_age_seconds: Option<f64>,
    pub retrying: i64,
    pub dead_letters: i64,
}

/// One consumer's dead letters.
#[derive(sqlx::FromRow, Serialize)]
pub struct ConsumerStatus {
    pub consumer: String,
    pub dead_letters: i64,
    /// Asked to replay (`postbox inbox-dlq replay`), not yet taken by a
    /// running consumer of that name.
    pub replay_waiting: i64,
}

#[derive(sqlx::FromRow)]
struct Session {
    pid: i32,
    application_name: Option<String>,
    client_addr: Option<String>,
    backend_start: Option<DateTime<Utc>>,
    state_change: Option<DateTime<Utc>>,
    partitions: Vec<i32>,
}

/// One relay process (or an unknown session holding postbox locks).
#[derive(Serialize)]
pub struct Instance {
    /// `postbox-relay:<pid>:<id>@<version>`: the prefix of its sessions'
    /// application_name.
    pub instance: String,
    /// The relay's version, from its instance name (null for relays before
    /// 0.1's console, and for sessions that are not a relay's).
    pub version: Option<String>,
    /// The relay's process id on its host, from the instance name.
    pub process_id: Option<u32>,
    /// Its worker sessions on this schema.
    pub sessions: usize,
    /// Backend pids of those sessions (for `pg_terminate_backend`).
    pub backend_pids: Vec<i32>,
    pub partitions: Vec<i32>,
    /// The same partitions, compact: `0-15,32-47`.
    pub partition_ranges: String,
    /// Client address of its sessions (null for a Unix socket, or without the
    /// privilege to see other roles' sessions).
    pub client_addr: Option<String>,
    /// Start of its oldest session on this schema (pg_stat_activity.backend_start).
    pub session_start: Option<DateTime<Utc>>,
    /// When its sessions last began or ended a statement (its heartbeat: a
    /// working relay queries every poll_interval); null without the privilege
    /// to see other roles' sessions.
    pub last_active: Option<DateTime<Utc>>,
    /// What the relay is doing, from its health record and its sessions.
    pub state: RelayState,
    /// The state in words, for an operator: which sink, since when, why,
    /// and what happens to its partitions.
    pub summary: String,
    /// Its own report (null for relays before migration 0013 and sessions
    /// that are not a relay's).
    pub health: Option<RelayHealth>,
}

/// The status of `schema`, read in one transaction: behind a transaction
/// pooler each statement's parse and execute reach the same server session
/// (`postbox::sql::statement`), and the figures come from one snapshot.
pub async fn schema_status(
    conn: &mut PgConnection,
    schema: &SchemaName,
) -> Result<SchemaStatus, crate::OpsError> {
    let mut tx = conn.begin().await?;
    let (read_path, version) = read_path(&mut tx, schema).await?;
    let wake_up = postbox::migrate::wake_up_in_force(&mut tx, schema)
        .await?
        .unwrap_or_default()
        .as_str();
    let q = Queries::new(schema);
    let topics: Vec<TopicStatus> = statement_as(&q.status_topics).fetch_all(&mut *tx).await?;
    let sessions: Vec<Session> = statement_as(&q.status_relays)
        .bind(schema.as_str())
        .fetch_all(&mut *tx)
        .await?;
    let consumers: Vec<ConsumerStatus> = statement_as(&q.status_inbox_dead_letters)
        .fetch_all(&mut *tx)
        .await?;
    // A schema behind (during an upgrade) may lack the newer tables.
    let (scheduled, next_due): (i64, Option<f64>) = if version >= SCHEDULED {
        statement_as(&q.status_scheduled)
            .fetch_one(&mut *tx)
            .await?
    } else {
        (0, None)
    };
    let health: Vec<RelayHealth> = if version >= RELAY_HEALTH {
        statement_as(&q.status_relay_health)
            .fetch_all(&mut *tx)
            .await?
    } else {
        Vec::new()
    };
    tx.commit().await?;
    let mut s = summarize(schema, read_path, wake_up, topics, sessions, health);
    s.scheduled = scheduled;
    s.next_scheduled_in_seconds = next_due;
    s.consumer_dead_letters = consumers.iter().map(|c| c.dead_letters).sum();
    s.consumers = consumers;
    Ok(s)
}

/// The migration that adds `outbox_scheduled`.
const SCHEDULED: i32 = 12;
/// The migration that adds `outbox_relays`.
const RELAY_HEALTH: i32 = 13;

/// Which read path relays use on `schema`, and the schema's migration
/// (`i32::MAX` when at this build's latest). A schema behind (during an
/// upgrade) is still reported from the migration before 0010 on; older ones
/// are refused.
async fn read_path(
    conn: &mut sqlx::PgConnection,
    schema: &SchemaName,
) -> Result<(&'static str, i32), postbox::MigrateError> {
    use postbox::migrate::{ensure_migrated, CLAIM_BY_POSITION};
    match ensure_migrated(conn, schema).await {
        Ok(()) => Ok(("position", i32::MAX)),
        // Behind by migrations that do not change how relays read.
        Err(postbox::MigrateError::SchemaOutdated { found, .. }) if found >= CLAIM_BY_POSITION => {
            Ok(("position", found))
        }
        Err(postbox::MigrateError::SchemaOutdated { found, .. })
            if found == CLAIM_BY_POSITION - 1 =>
        {
            Ok(("head", found))
        }
        Err(e) => Err(e),
    }
}

fn summarize(
    schema: &SchemaName,
    read_path: &'static str,
    wake_up: &'static str,
    topics: Vec<TopicStatus>,
    sessions: Vec<Session>,
    health: Vec<RelayHealth>,
) -> SchemaStatus {
    let mut by_instance: BTreeMap<String, Vec<Session>> = BTreeMap::new();
    for s in sessions {
        let name = match s.application_name.as_deref() {
            Some(app) if app.starts_with("postbox-relay:") => {
                app.strip_suffix(":worker").unwrap_or(app).to_owned()
            }
            Some(app) if !app.is_empty() => format!("{app} (pid {}, not a relay session)", s.pid),
            _ => format!("pid {} (not a relay session)", s.pid),
        };
        by_instance.entry(name).or_default().push(s);
    }
    // A relay standing by holds no lock: its record alone shows it.
    let mut health: BTreeMap<String, RelayHealth> = health
        .into_iter()
        .map(|h| (h.instance.clone(), h))
        .collect();
    for name in health.keys() {
        let key = by_instance
            .keys()
            .find(|k| name_matches(k, name))
            .cloned()
            .unwrap_or_else(|| name.clone());
        by_instance.entry(key).or_default();
    }
    let relays: Vec<Instance> = by_instance
        .into_iter()
        .map(|(instance, sessions)| {
            let record = health
                .keys()
                .find(|k| name_matches(&instance, k))
                .cloned()
                .and_then(|k| health.remove(&k));
            instance_of(instance, sessions, record)
        })
        .collect();
    let owned: std::collections::BTreeSet<i32> = relays
        .iter()
        .flat_map(|r| r.partitions.iter().copied())
        .collect();
    let unowned: Vec<i32> = (0..i32::from(PARTITIONS))
        .filter(|p| !owned.contains(p))
        .collect();
    SchemaStatus {
        schema: schema.to_string(),
        read_path,
        wake_up,
        pending: topics.iter().map(|t| t.pending).sum(),
        oldest_pending_age_seconds: topics
            .iter()
            .filter_map(|t| t.oldest_pending_age_seconds)
            .reduce(f64::max),
        retrying: topics.iter().map(|t| t.retrying).sum(),
        dead_letters: topics.iter().map(|t| t.dead_letters).sum(),
        consumer_dead_letters: 0,
        scheduled: 0,
        next_scheduled_in_seconds: None,
        topics,
        consumers: Vec::new(),
        relays_cannot_publish: relays
            .iter()
            .filter(|r| r.state == RelayState::CannotPublish)
            .count(),
        relays_stale: relays
            .iter()
            .filter(|r| r.state == RelayState::Stale)
            .count(),
        relays,
        partitions_owned: owned.len(),
        partitions_unowned: ranges(&unowned),
    }
}

/// Sorted, distinct numbers as compact ranges: `0-15,32-47,50`.
fn ranges(sorted: &[i32]) -> String {
    let mut parts = Vec::new();
    let mut i = 0;
    while i < sorted.len() {
        let start = sorted[i];
        let mut end = start;
        while i + 1 < sorted.len() && sorted[i + 1] == end + 1 {
            i += 1;
            end = sorted[i];
        }
        parts.push(if start == end {
            start.to_string()
        } else {
            format!("{start}-{end}")
        });
        i += 1;
    }
    parts.join(",")
}

/// Seconds as a short age: `42s`, `3m05s`, `2h07m`, `3d04h`.
pub fn age(secs: f64) -> String {
    let s = secs.max(0.0) as u64;
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m{:02}s", s / 60, s % 60),
        3600..86400 => format!("{}h{:02}m", s / 3600, s % 3600 / 60),
        _ => format!("{}d{:02}h", s / 86400, s % 86400 / 3600),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_are_compact() {
        assert_eq!(ranges(&[]), "");
        assert_eq!(ranges(&[5]), "5");
        let v: Vec<i32> = (0..16).chain(32..48).chain([50]).collect();
        assert_eq!(ranges(&v), "0-15,32-47,50");
    }

    #[test]
    fn ages_are_short() {
        assert_eq!(age(42.7), "42s");
        assert_eq!(age(185.0), "3m05s");
        assert_eq!(age(7620.0), "2h07m");
        assert_eq!(age(273_600.0), "3d04h");
    }
}
