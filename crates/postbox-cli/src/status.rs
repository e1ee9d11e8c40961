//! `postbox status`: per schema, what waits in the outbox and which relay
//! instances own which partitions. Read-only; safe on a live system.

use crate::connection::{connect, DatabaseUrl, Flag};
use crate::table::{clip, table};
use crate::CliError;
use postbox::{SchemaName, PARTITIONS};
use postbox_console::ops::status::{age, schema_status, SchemaStatus};

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    database_url: Flag<DatabaseUrl>,
    /// Schema to report on (repeat, or comma-separated, for several).
    #[arg(
        long = "schema",
        visible_alias = "schemas",
        required = true,
        value_delimiter = ','
    )]
    schemas: Vec<String>,
    /// Print one JSON array (one object per schema) instead of tables.
    #[arg(long)]
    json: bool,
}

pub async fn run(a: Args) -> Result<(), CliError> {
    let schemas = a
        .schemas
        .iter()
        .map(|s| SchemaName::new(s))
        .collect::<Result<Vec<_>, _>>()?;
    let mut conn = connect(a.database_url.required()?, "postbox status").await?;
    let mut out = Vec::new();
    for schema in &schemas {
        out.push(schema_status(&mut conn, schema).await?);
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
    if s.relays.is_empty() {
        out.push_str(&format!(
            "  relays: none; the {PARTITIONS} partitions are unowned (start `postbox relay --schemas {}`)\n",
            s.schema
        ));
        return out;
    }
    out.push_str(&format!(
        "  relays: {} instance(s), {} of {PARTITIONS} partitions owned{}\n",
        s.relays.len(),
        s.partitions_owned,
        if s.partitions_unowned.is_empty() {
            String::new()
        } else {
            format!(" (unowned: {})", s.partitions_unowned)
        }
    ));
    let mut t = vec![vec![
        "INSTANCE".to_string(),
        "SESSIONS".into(),
        "OWNED".into(),
        "PARTITIONS".into(),
        "CLIENT".into(),
        "SESSION_START".into(),
    ]];
    for r in &s.relays {
        t.push(vec![
            r.instance.clone(),
            r.sessions.to_string(),
            r.partitions.len().to_string(),
            if r.partition_ranges.is_empty() {
                "-".into()
            } else {
                r.partition_ranges.clone()
            },
            match (&r.client_addr, r.session_start) {
                (Some(a), _) => a.clone(),
                (None, Some(_)) => "local".into(),
                (None, None) => "?".into(),
            },
            r.session_start.map_or("?".into(), |t| {
                t.format("%Y-%m-%d %H:%M:%S UTC").to_string()
            }),
        ]);
    }
    out.push_str(&indent(&table(&t)));
    out
}

fn indent(s: &str) -> String {
    s.lines().map(|l| format!("  {l}\n")).collect()
}
