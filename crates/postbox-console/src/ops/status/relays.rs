//! The relays of a schema as an operator reads them: each one's own health
//! record (`outbox_relays`, migration 0013) joined to the sessions that
//! hold its locks, and the state and sentence `postbox status` and the
//! console show.

use super::{age, ranges, Instance, Session};
use chrono::{DateTime, Utc};
use serde::Serialize;

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

/// Whether the sessions' instance name (`postbox-relay:<pid>:<id>@<version>`)
/// is the record's (`postbox-relay:<pid>:<id>`).
pub(super) fn name_matches(sessions: &str, record: &str) -> bool {
    sessions == record
        || sessions
            .strip_prefix(record)
            .is_some_and(|rest| rest.starts_with('@'))
}

pub(super) fn instance_of(
    instance: String,
    sessions: Vec<Session>,
    health: Option<RelayHealth>,
) -> Instance {
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
