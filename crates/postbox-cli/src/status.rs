//! `postbox status`: per schema, what waits in the outbox and which relay
//! instances own which partitions. Read-only; safe on a live system.

use crate::connection::{connect, DatabaseUrl, Flag};
use crate::table::{clip, table};
use crate::CliError;
use postbox::{SchemaName, PARTITIONS};
use postbox_console::ops::status::{age, schema_status, RelayState, SchemaStatus};
use postbox_console::OpsError;

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    database_url: Flag<DatabaseUrl>,
    /// Schema to report on (repeat, or comma-separated, for several) [default:
    /// every schema of the database that postbox migrated].
    #[arg(long = "schema", visible_alias = "schemas", value_delimiter = ',')]
    schemas: Vec<String>,
    /// Print one JSON array (one object per schema) instead of tables.
    #[arg(long)]
    json: bool,
}

pub async fn run(a: Args) -> Result<(), CliError> {
    let mut schemas = a
        .schemas
        .iter()
        .map(|s| SchemaName::new(s))
        .collect::<Result<Vec<_>, _>>()?;
    let mut conn = connect(a.database_url.required()?, "postbox status").await?;
    let listed = schemas.is_empty();
    if listed {
        schemas = postbox::migrate::migrated_schemas(&mut conn).await?;
        if schemas.is_empty() {
            return Err(
                "no schema of this database has postbox tables: run `postbox migrate --schema NAME` first, or give --schema"
                    .into(),
            );
        }
    }
    let mut out = Vec::new();
    for schema in &schemas {
        match schema_status(&mut conn, schema).await {
            Ok(s) => out.push(s),
            // Listed a moment ago, dropped since: not an error of this command.
            Err(OpsError::Migrate(postbox::MigrateError::SchemaNotMigrated { .. })) if listed => {}
            Err(OpsError::Database(e)) if listed && gone(&e) => {}
            Err(e) => return Err(e.into()),
        }
    }
    if a.json {
        println!("{}", serde_json::to_string_pretty(&out)?);
    } else {
        for (i, s) in out.iter().enumerate() {
            if i > 0 {
                println!();
            }
            print!("{}", render(s));
        }
    }
    Ok(())
}

/// A table or schema that no longer exists (42P01, 3F000).
fn gone(e: &sqlx::Error) -> bool {
    e.as_database_error()
        .and_then(|d| d.code())
        .is_some_and(|c| c == "42P01" || c == "3F000")
}

fn render(s: &SchemaStatus) -> String {
    let mut out = format!(
        "schema {}: {} pending{}, {} retrying, {} dead letter(s), {} consumer dead letter(s)\n",
        s.schema,
        s.pending,
        s.oldest_pending_age_seconds
            .map(|a| format!(" (oldest {})", age(a)))
            .unwrap_or_default(),
        s.retrying,
        s.dead_letters,
        s.consumer_dead_letters
    );
    out.push_str(match s.read_path {
        "position" => "read path: each claim starts at its partition's position\n",
        _ => {
            "read path: each claim reads its partitions from their first unsent row; \
              run `postbox migrate` (0010) for a read path that a long transaction does not slow\n"
        }
    });
    out.push_str(&format!("wake-up: {}\n", s.wake_up));
    if s.scheduled > 0 {
        out.push_str(&format!(
            "scheduled: {} waiting{}\n",
            s.scheduled,
            s.next_scheduled_in_seconds
                .map(|d| format!(", the next due in {}", age(d.max(0.0))))
                .unwrap_or_default()
        ));
    }
    if !s.topics.is_empty() {
        let mut t = vec![vec![
            "TOPIC".to_string(),
            "PENDING".into(),
            "OLDEST".into(),
            "RETRYING".into(),
            "DEAD_LETTERS".into(),
        ]];
        for topic in &s.topics {
            t.push(vec![
                clip(&topic.topic, 40),
                topic.pending.to_string(),
                topic.oldest_pending_age_seconds.map_or("-".into(), age),
                topic.retrying.to_string(),
                topic.dead_letters.to_string(),
            ]);
        }
        out.push_str(&indent(&table(&t)));
    }
    if !s.consumers.is_empty() {
        let mut t = vec![vec![
            "CONSUMER".to_string(),
            "DEAD_LETTERS".into(),
            "REPLAY_WAITING".into(),
        ]];
        for c in &s.consumers {
            t.push(vec![
                clip(&c.consumer, 40),
                c.dead_letters.to_string(),
                c.replay_waiting.to_string(),
            ]);
        }
        out.push_str(&indent(&table(&t)));
        out.push_str(&format!(
            "  consumer dead letters: `postbox inbox-dlq list --schema {}`\n",
            s.schema
        ));
    }
    out.push_str(&render_relays(s));
    out
}

/// The relays of `s`: who owns what, and a line for each that does not publish.
fn render_relays(s: &SchemaStatus) -> String {
    let mut out = String::new();
    if s.relays.is_empty() {
        out.push_str(&format!(
            "  relays: none; the {PARTITIONS} partitions are unowned (start `postbox relay --schemas {}`)\n",
            s.schema
        ));
        return out;
    }
    out.push_str(&format!(
        "  relays: {} instance(s), {} of {PARTITIONS} partitions owned{}{}{}\n",
        s.relays.len(),
        s.partitions_owned,
        if s.partitions_unowned.is_empty() {
            String::new()
        } else {
            format!(" (unowned: {})", s.partitions_unowned)
        },
        if s.relays_cannot_publish > 0 {
            format!(", {} cannot publish", s.relays_cannot_publish)
        } else {
            String::new()
        },
        if s.relays_stale > 0 {
            format!(", {} stale", s.relays_stale)
        } else {
            String::new()
        },
    ));
    let mut t = vec![vec![
        "INSTANCE".to_string(),
        "STATE".into(),
        "HOST".into(),
        "SESSIONS".into(),
        "OWNED".into(),
        "PARTITIONS".into(),
        "CLIENT".into(),
        "SESSION_START".into(),
    ]];
    for r in &s.relays {
        // A relay standing by, or stale, may hold no session: nothing to say
        // of sessions it does not have.
        let none = r.sessions == 0;
        t.push(vec![
            flat(&r.instance),
            r.state.as_str().into(),
            r.health.as_ref().map_or("-".into(), |h| clip(&h.host, 40)),
            r.sessions.to_string(),
            r.partitions.len().to_string(),
            if r.partition_ranges.is_empty() {
                "-".into()
            } else {
                r.partition_ranges.clone()
            },
            match (&r.client_addr, r.session_start) {
                _ if none => "-".into(),
                (Some(a), _) => a.clone(),
                (None, Some(_)) => "local".into(),
                (None, None) => "?".into(),
            },
            match r.session_start {
                _ if none => "-".into(),
                Some(t) => t.format("%Y-%m-%d %H:%M:%S UTC").to_string(),
                None => "?".into(),
            },
        ]);
    }
    out.push_str(&indent(&table(&t)));
    // Under the table, the relays that do not publish, the most urgent
    // first: what is wrong, since when, and what happens to their keys.
    let mut trouble: Vec<_> = s
        .relays
        .iter()
        .filter(|r| r.state != RelayState::Publishing)
        .collect();
    trouble.sort_by_key(|r| urgency(r.state));
    for r in trouble {
        let mark = if r.state == RelayState::Unknown {
            '?'
        } else {
            '!'
        };
        out.push_str(&format!(
            "  {mark} {} {}\n",
            flat(&r.instance),
            flat(&r.summary)
        ));
    }
    out
}

/// The order of the lines under the relays table: keys waiting first.
fn urgency(state: RelayState) -> u8 {
    match state {
        RelayState::CannotPublish => 0,
        RelayState::Stale => 1,
        RelayState::StandingBy => 2,
        RelayState::Unknown => 3,
        RelayState::Publishing => 4,
    }
}

/// One line of text a relay wrote (its host, its sinks' errors): control
/// characters, a terminal's escape sequences among them, become spaces.
fn flat(s: &str) -> String {
    clip(s, usize::MAX)
}

fn indent(s: &str) -> String {
    s.lines().map(|l| format!("  {l}\n")).collect()
}

#[cfg(test)]
mod tests {
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
            out.contains(
                "relays: 1 instance(s), 0 of 64 partitions owned (unowned: 0-63), 1 stale\n"
            ) && out.contains("  ! postbox-relay:103:cc03 stale: last reported 2m05s ago;"),
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
}
