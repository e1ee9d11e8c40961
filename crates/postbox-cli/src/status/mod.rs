//! `postbox status`: per schema, what waits in the outbox and which relay
//! instances own which partitions. Read-only; safe on a live system.

use crate::connection::{connect, DatabaseUrl, Flag};
use crate::table::{clip, table};
use crate::CliError;
use postbox::{SchemaName, PARTITIONS};
use postbox_console::ops::status::{age, schema_status, Instance, RelayState, SchemaStatus};
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
    out.push_str(&indent(&relays_table(&s.relays)));
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

/// One line per relay: its state, host, sessions and partitions.
fn relays_table(relays: &[Instance]) -> String {
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
    for r in relays {
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
    table(&t)
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
mod tests;
