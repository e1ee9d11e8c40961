//! Per schema: what waits in the outbox, what is dead-lettered, and which
//! relay instances own which partitions (`postbox status`, the console's
//! overview and relays, `GET /api/v1/schemas/{schema}`). Read-only.

use chrono::{DateTime, Utc};
use postbox::sql::{statement_as, Queries};
use postbox::{SchemaName, PARTITIONS};
use serde::Serialize;
use sqlx::{Connection, PgConnection};
use std::collections::BTreeMap;

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

/// What a relay is doing, as `postbox status` and the console show it.
#[derive(Serialize, Clone, Copy, PartialEq, Eq, Debug)]
#[serde(rename_all = "snake_case")]
pub enum RelayState {
    /// Every sink publishes.
    Publishing,
    /// A sink cannot publish and the relay owns partitions: their events
    /// wait (no relay that can publish is there to take them, or it is
    /// about to give them back).
    CannotPublish,
    /// A sink cannot publish; it owns nothing while relays that can publish
    /// serve, and takes its share back when its broker answers again.
    StandingBy,
    /// Its health record was not renewed in time: the relay was killed, or
    /// cannot reach PostgreSQL. Its partitions are free once its sessions end.
    Stale,
    /// No health record: a relay from before migration 0013, or a session
    /// that is not a relay's.
    Unknown,
}

impl RelayState {
    /// The name `--json` and the API give it.
    pub fn as_str(self) -> &'static str {
        match self {
            RelayState::Publishing => "publishing",
            RelayState::CannotPublish => "cannot_publish",
            RelayState::StandingBy => "standing_by",
            RelayState::Stale => "stale",
            RelayState::Unknown => "unknown",
        }
    }
}

/// A relay's own report (`outbox_relays`, migration 0013), renewed every
/// `health_interval`.
#[derive(sqlx::FromRow, Serialize, Clone)]
pub struct RelayHealth {
    #[serde(skip)]
    pub instance: String,
    pub version: String,
    /// The host it runs on (a pod's name in Kubernetes).
    pub host: String,
    pub started_at: DateTime<Utc>,
    pub reported_at: DateTime<Utc>,
    /// Not renewed in time (see [`RelayState::Stale`]).
    pub stale: bool,
    pub reported_seconds_ago: f64,
    /// False while it stands by.
    pub taking_partitions: bool,
    pub owned_partitions: i32,
    /// The start of its longest sink outage (null while every sink publishes).
    pub unavailable_since: Option<DateTime<Utc>>,
    pub unavailable_seconds: Option<f64>,
    pub last_publish_at: Option<DateTime<Utc>>,
    /// When every sink was last seen working (an acknowledged publish or an
    /// answered check).
    pub confirmed_at: Option<DateTime<Utc>>,
    /// Events sent in its last `interval_ms`.
    pub sent_last_interval: i64,
    pub interval_ms: i32,
    #[sqlx(json)]
    pub sinks: Vec<SinkHealth>,
}

/// One sink of a relay, as the relay reported it.
#[derive(serde::Deserialize, Serialize, Clone, Debug)]
pub struct SinkHealth {
    pub sink: String,
    /// `publishing` or `unavailable`.
    pub state: String,
    /// Unavailable since (null while publishing).
    pub since: Option<DateTime<Utc>>,
    /// The last error of the outage.
    pub error: Option<String>,
    pub last_publish_at: Option<DateTime<Utc>>,
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

/// Whether the sessions' instance name (`postbox-relay:<pid>:<id>@<version>`)
/// is the record's (`postbox-relay:<pid>:<id>`).
fn name_matches(sessions: &str, record: &str) -> bool {
    sessions == record
        || sessions
            .strip_prefix(record)
            .is_some_and(|rest| rest.starts_with('@'))
}

fn instance_of(instance: String, sessions: Vec<Session>, health: Option<RelayHealth>) -> Instance {
    let mut partitions: Vec<i32> = sessions
        .iter()
        .flat_map(|s| s.partitions.iter().copied())
        .collect();
    partitions.sort_unstable();
    let mut addrs: Vec<&str> = sessions
        .iter()
        .filter_map(|s| s.client_addr.as_deref())
        .collect();
    addrs.sort_unstable();
    addrs.dedup();
    let (state, summary) = state_of(health.as_ref(), partitions.len());
    Instance {
        version: instance
            .strip_prefix("postbox-relay:")
            .and_then(|r| r.split_once('@'))
            .map(|(_, v)| v.to_owned())
            .or_else(|| health.as_ref().map(|h| h.version.clone())),
        process_id: instance
            .strip_prefix("postbox-relay:")
            .and_then(|r| r.split(['@', ':']).next())
            .and_then(|p| p.parse().ok()),
        sessions: sessions.len(),
        backend_pids: sessions.iter().map(|s| s.pid).collect(),
        partition_ranges: ranges(&partitions),
        partitions,
        client_addr: (!addrs.is_empty()).then(|| addrs.join(",")),
        session_start: sessions.iter().filter_map(|s| s.backend_start).min(),
        last_active: sessions.iter().filter_map(|s| s.state_change).max(),
        instance,
        state,
        summary,
        health,
    }
}

/// A relay's state and the sentence an on-call engineer reads.
fn state_of(health: Option<&RelayHealth>, owned: usize) -> (RelayState, String) {
    let Some(h) = health else {
        return (
            RelayState::Unknown,
            "no health record (a relay before migration 0013, or not a relay)".into(),
        );
    };
    if h.stale {
        return (
            RelayState::Stale,
            format!(
                "stale: last reported {} ago; killed, or cannot reach PostgreSQL{}",
                age(h.reported_seconds_ago),
                if owned > 0 {
                    format!("; its {owned} partition(s) pass to the others once its sessions end")
                } else {
                    String::new()
                }
            ),
        );
    }
    let down: Vec<String> = h
        .sinks
        .iter()
        .filter(|s| s.state != "publishing")
        .map(|s| {
            let since = s
                .since
                .map(|t| format!(" since {}", t.format("%H:%M:%S UTC")))
                .unwrap_or_default();
            let why = s
                .error
                .as_deref()
                .map(|e| format!(" ({e})"))
                .unwrap_or_default();
            format!("{} unavailable{since}{why}", s.sink)
        })
        .collect();
    if down.is_empty() {
        let rate = h.sent_last_interval as f64 * 1000.0 / f64::from(h.interval_ms.max(1));
        return (
            RelayState::Publishing,
            format!("publishing: {rate:.0} events/s, owns {owned} partition(s)"),
        );
    }
    let down = down.join("; ");
    let outage = h.unavailable_seconds.map(age).unwrap_or_default();
    if owned > 0 {
        (
            RelayState::CannotPublish,
            format!(
                "CANNOT PUBLISH for {outage}: {down}. Its {owned} partition(s) wait: no relay that can publish is there to take them, or they are being handed over"
            ),
        )
    } else if !h.taking_partitions {
        (
            RelayState::StandingBy,
            format!(
                "standing by for {outage}: {down}. It owns nothing; relays that can publish serve its keys, and it takes its share back when its broker answers. Check this relay's path to its broker"
            ),
        )
    } else {
        (
            RelayState::StandingBy,
            format!(
                "owns nothing and cannot publish for {outage}: {down}. It takes partitions only when no other relay holds them"
            ),
        )
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
