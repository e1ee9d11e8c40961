//! The text `postbox status` prints, for each relay state.
use super::*;
use chrono::{DateTime, TimeZone, Utc};
use postbox_console::ops::status::{Instance, RelayHealth, SinkHealth};

fn at(h: u32, m: u32, s: u32) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 12, 7, h, m, s).unwrap()
}

fn health(name: &str, host: &str, stale: bool, down: Option<&str>) -> RelayHealth {
    RelayHealth {
        instance: name.into(),
        version: "0.1.0".into(),
        host: host.into(),
        started_at: at(3, 0, 0),
        reported_at: at(3, 12, 49),
        stale,
        reported_seconds_ago: if stale { 125.0 } else { 0.4 },
        taking_partitions: down.is_none(),
        owned_partitions: 0,
        unavailable_since: down.map(|_| at(3, 12, 7)),
        unavailable_seconds: down.map(|_| 42.0),
        last_publish_at: Some(at(3, 12, 6)),
        confirmed_at: down.is_none().then(|| at(3, 12, 49)),
        sent_last_interval: 0,
        interval_ms: 1000,
        sinks: vec![SinkHealth {
            sink: "bullmq".into(),
            state: if down.is_some() {
                "unavailable"
            } else {
                "publishing"
            }
            .into(),
            since: down.map(|_| at(3, 12, 7)),
            error: down.map(str::to_owned),
            last_publish_at: Some(at(3, 12, 6)),
        }],
    }
}

/// A relay as `schema_status` reports it (its summary as status.rs words it).
fn relay(
    name: &str,
    state: RelayState,
    sessions: usize,
    partitions: std::ops::Range<i32>,
    health: Option<RelayHealth>,
    summary: &str,
) -> Instance {
    let partitions: Vec<i32> = partitions.collect();
    Instance {
        instance: name.into(),
        version: Some("0.1.0".into()),
        process_id: name.split(':').nth(1).and_then(|p| p.parse().ok()),
        sessions,
        backend_pids: (0..sessions as i32).map(|i| 9000 + i).collect(),
        partition_ranges: match (partitions.first(), partitions.last()) {
            (Some(a), Some(b)) => format!("{a}-{b}"),
            _ => String::new(),
        },
        partitions,
        client_addr: (sessions > 0).then(|| "10.0.0.5".into()),
        session_start: (sessions > 0).then(|| at(3, 0, 1)),
        last_active: (sessions > 0).then(|| at(3, 12, 49)),
        state,
        summary: summary.into(),
        health,
    }
}

fn schema(relays: Vec<Instance>) -> SchemaStatus {
    let owned: usize = relays.iter().map(|r| r.partitions.len()).sum();
    SchemaStatus {
        schema: "shop".into(),
        read_path: "position",
        wake_up: "adaptive",
        pending: 12,
        oldest_pending_age_seconds: Some(42.0),
        retrying: 0,
        dead_letters: 0,
        consumer_dead_letters: 0,
        scheduled: 0,
        next_scheduled_in_seconds: None,
        topics: Vec::new(),
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
        partitions_owned: owned,
        partitions_unowned: if owned == 64 {
            String::new()
        } else {
            format!("{owned}-63")
        },
    }
}

const CANNOT: &str = "CANNOT PUBLISH for 42s: bullmq unavailable since 03:12:07 UTC (Connection refused). Its 16 partition(s) wait: no relay that can publish is there to take them, or they are being handed over";
const STANDING: &str = "standing by for 42s: bullmq unavailable since 03:12:07 UTC (Connection refused). It owns nothing; relays that can publish serve, and it takes its share back when the broker answers";
const STALE: &str = "stale: last reported 2m05s ago; killed, or cannot reach PostgreSQL; its 16 partition(s) pass to the others once its sessions end";

/// The relays lines of a rendering (from the headline on).
fn relays_part(out: &str) -> &str {
    &out[out.find("  relays:").expect(out)..]
}

#[test]
fn relays_publishing_have_no_line_under_the_table() {
    let out = render(&schema(vec![relay(
        "postbox-relay:101:aa01@0.1.0",
        RelayState::Publishing,
        4,
        0..64,
        Some(health("postbox-relay:101:aa01", "web-1", false, None)),
        "publishing: 120 events/s, owns 64 partition(s)",
    )]));
    assert_eq!(
        relays_part(&out),
        "  relays: 1 instance(s), 64 of 64 partitions owned
  INSTANCE                      STATE       HOST   SESSIONS  OWNED  PARTITIONS  CLIENT    SESSION_START
  postbox-relay:101:aa01@0.1.0  publishing  web-1  4         64     0-63        10.0.0.5  2026-12-07 03:00:01 UTC
",
        "{out}"
    );
}

#[test]
fn each_relay_not_publishing_gets_its_summary_under_the_table_the_most_urgent_first() {
    let out = render(&schema(vec![
        relay(
            "postbox-relay:101:aa01@0.1.0",
            RelayState::Publishing,
            4,
            16..48,
            Some(health("postbox-relay:101:aa01", "web-1", false, None)),
            "publishing: 120 events/s, owns 32 partition(s)",
        ),
        relay(
            "postbox-relay:102:bb02",
            RelayState::StandingBy,
            0,
            0..0,
            Some(health(
                "postbox-relay:102:bb02",
                "web-2",
                false,
                Some("Connection refused"),
            )),
            STANDING,
        ),
        relay(
            "postbox-relay:103:cc03@0.1.0",
            RelayState::Stale,
            2,
            48..64,
            Some(health("postbox-relay:103:cc03", "web-3", true, None)),
            STALE,
        ),
        relay(
            "postbox-relay:104:dd04@0.1.0",
            RelayState::CannotPublish,
            4,
            0..16,
            Some(health(
                "postbox-relay:104:dd04",
                "web-4",
                false,
                Some("Connection refused"),
            )),
            CANNOT,
        ),
        relay(
            "postbox-relay:105:ee05@0.0.9",
            RelayState::Unknown,
            1,
            0..0,
            None,
            "no health record (a relay before migration 0013, or not a relay)",
        ),
    ]));
    assert_eq!(
        relays_part(&out),
        format!(
            "  relays: 5 instance(s), 64 of 64 partitions owned, 1 cannot publish, 1 stale
  INSTANCE                      STATE           HOST   SESSIONS  OWNED  PARTITIONS  CLIENT    SESSION_START
  postbox-relay:101:aa01@0.1.0  publishing      web-1  4         32     16-47       10.0.0.5  2026-12-07 03:00:01 UTC
  postbox-relay:102:bb02        standing_by     web-2  0         0      -           -         -
  postbox-relay:103:cc03@0.1.0  stale           web-3  2         16     48-63       10.0.0.5  2026-12-07 03:00:01 UTC
  postbox-relay:104:dd04@0.1.0  cannot_publish  web-4  4         16     0-15        10.0.0.5  2026-12-07 03:00:01 UTC
  postbox-relay:105:ee05@0.0.9  unknown         -      1         0      -           10.0.0.5  2026-12-07 03:00:01 UTC
  ! postbox-relay:104:dd04@0.1.0 {CANNOT}
  ! postbox-relay:103:cc03@0.1.0 {STALE}
  ! postbox-relay:102:bb02 {STANDING}
  ? postbox-relay:105:ee05@0.0.9 no health record (a relay before migration 0013, or not a relay)
"
        ),
        "{out}"
    );
}

#[test]
fn the_headline_counts_what_cannot_publish_and_what_is_stale() {
    let out = render(&schema(vec![relay(
        "postbox-relay:104:dd04@0.1.0",
        RelayState::CannotPublish,
        4,
        0..64,
        Some(health(
            "postbox-relay:104:dd04",
            "web-4",
            false,
            Some("Connection refused"),
        )),
        CANNOT,
    )]));
    assert!(
        out.contains("relays: 1 instance(s), 64 of 64 partitions owned, 1 cannot publish\n")
            && out.contains(&format!("  ! postbox-relay:104:dd04@0.1.0 {CANNOT}\n")),
        "{out}"
    );
    let out = render(&schema(vec![relay(
        "postbox-relay:103:cc03",
        RelayState::Stale,
        0,
        0..0,
        Some(health("postbox-relay:103:cc03", "web-3", true, None)),
        "stale: last reported 2m05s ago; killed, or cannot reach PostgreSQL",
    )]));
    assert!(
        out.contains("relays: 1 instance(s), 0 of 64 partitions owned (unowned: 0-63), 1 stale\n")
            && out.contains("  ! postbox-relay:103:cc03 stale: last reported 2m05s ago;"),
        "{out}"
    );
}

/// What a relay wrote (its host, a broker's error) reaches the terminal
/// without its control characters: no escape sequence runs.
#[test]
fn what_a_relay_wrote_is_printed_without_control_characters() {
    let mut h = health(
        "postbox-relay:104:dd04",
        "web\u{1b}[2J-4",
        false,
        Some("boom"),
    );
    h.sinks[0].error = Some("line one\nline two\u{1b}]0;title\u{7}".into());
    let out = render(&schema(vec![relay(
        "postbox-relay:104:dd04@0.1.0",
        RelayState::CannotPublish,
        4,
        0..64,
        Some(h),
        "CANNOT PUBLISH for 42s: bullmq unavailable (line one\nline two\u{1b}]0;title\u{7}). Its 64 partition(s) wait",
    )]));
    assert!(!out.contains('\u{1b}') && !out.contains('\u{7}'), "{out:?}");
    assert!(
        out.contains("web [2J-4")
            && out.contains("(line one line two ]0;title ). Its 64 partition(s) wait\n"),
        "{out}"
    );
}
