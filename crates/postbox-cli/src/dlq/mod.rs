//! `postbox dlq`: inspect, replay and purge the dead letters of a schema.
//!
//! Safe on a live system: `replay` moves rows back into the outbox in one
//! statement (a running relay is woken by the outbox's NOTIFY trigger), and
//! `purge` is one DELETE; both select rows with the same bind-parameter filters
//! as `list`, and do nothing without `--yes`.

use crate::table::{cells, clip, table};
use crate::target::{DeadLetterId, SchemaArgs};
use crate::CliError;
use chrono::{DateTime, Utc};
use postbox::sql::{statement_as, Queries};
use serde::Serialize;
use sqlx::{Connection, PgConnection};

mod act;
mod filter;

use act::{purge, replay};
use filter::Filter;
pub(crate) use filter::{age, Act};

#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    command: Command,
}

#[derive(clap::Subcommand)]
enum Command {
    /// List dead letters (oldest first) as a table, or JSON with --json.
    List {
        #[command(flatten)]
        target: SchemaArgs,
        #[command(flatten)]
        filter: Filter,
        /// Print one JSON array instead of a table.
        #[arg(long)]
        json: bool,
        /// Show at most this many rows (0 = all).
        #[arg(long, default_value_t = 100)]
        limit: i64,
    },
    /// Print one dead letter in full, as JSON.
    Show {
        #[command(flatten)]
        target: SchemaArgs,
        /// The dead letter's id (its id in the outbox, as `list` shows it).
        #[command(flatten)]
        id: DeadLetterId,
    },
    /// Move dead letters back into the outbox, to be relayed again.
    ///
    /// They keep their event_id (so the broker and the consumers' inbox still
    /// de-duplicate them), topic, event, key, payload, headers and created_at,
    /// and start over with attempts = 0. They get new outbox ids in dead-letter
    /// order: replayed events of one key keep their relative order, and are
    /// delivered after the rows of their key already waiting in the outbox.
    /// Without --yes, only prints what it would replay.
    Replay {
        #[command(flatten)]
        target: SchemaArgs,
        #[command(flatten)]
        filter: Filter,
        #[command(flatten)]
        act: Act,
    },
    /// Delete dead letters for good. Without --yes, only prints what it would delete.
    Purge {
        #[command(flatten)]
        target: SchemaArgs,
        #[command(flatten)]
        filter: Filter,
        #[command(flatten)]
        act: Act,
    },
}

/// One dead letter, as `list --json` and `show` print it.
#[derive(sqlx::FromRow, Serialize)]
struct DeadLetter {
    id: i64,
    event_id: uuid::Uuid,
    topic: String,
    event: String,
    key: Option<String>,
    payload: serde_json::Value,
    headers: serde_json::Value,
    created_at: DateTime<Utc>,
    attempts: i32,
    last_error: String,
    dead_at: DateTime<Utc>,
    /// The outbox already holds a row with this event_id (replay would conflict).
    in_outbox: bool,
    #[serde(skip)]
    matching: i64,
}

/// How many rows a dry run or a replay/purge report prints.
pub(crate) const SHOWN: i64 = 100;

pub async fn run(a: Args) -> Result<(), CliError> {
    match a.command {
        Command::List {
            target,
            filter,
            json,
            limit,
        } => {
            filter.check()?;
            if limit < 0 {
                return Err("--limit must be 0 (all) or more".into());
            }
            let (schema, mut conn) = target.open("postbox dlq").await?;
            let q = Queries::new(&schema);
            let rows = select(&mut conn, &q, &filter, (limit > 0).then_some(limit)).await?;
            let matching = rows.first().map_or(0, |r| r.matching);
            if json {
                println!("{}", serde_json::to_string(&rows)?);
            } else if rows.is_empty() {
                println!("no dead letters in schema {schema} match");
            } else {
                print!("{}", dead_letter_table(&rows));
            }
            if matching > rows.len() as i64 {
                eprintln!(
                    "showing {} of {matching} matching dead letters; --limit 0 shows all",
                    rows.len()
                );
            }
            Ok(())
        }
        Command::Show { target, id } => {
            let id = id.get();
            let (schema, mut conn) = target.open("postbox dlq").await?;
            let q = Queries::new(&schema);
            let filter = Filter {
                ids: vec![id],
                ..Filter::default()
            };
            let row = select(&mut conn, &q, &filter, None)
                .await?
                .pop()
                .ok_or_else(|| {
                    format!("no dead letter with id {id} in schema {schema}; `postbox dlq list --schema {schema}` lists them")
                })?;
            println!("{}", serde_json::to_string_pretty(&row)?);
            Ok(())
        }
        Command::Replay {
            target,
            filter,
            act,
        } => replay(target, filter, act).await,
        Command::Purge {
            target,
            filter,
            act,
        } => purge(target, filter, act).await,
    }
}

async fn select(
    conn: &mut PgConnection,
    q: &Queries,
    filter: &Filter,
    limit: Option<i64>,
) -> Result<Vec<DeadLetter>, sqlx::Error> {
    // A transaction of its own (a savepoint inside one): behind a
    // transaction pooler, parse and execute reach the same server session.
    let mut tx = conn.begin().await?;
    let rows = filter
        .bind(statement_as(&q.dead_letter_list))
        .bind(limit)
        .bind(None::<i64>)
        .fetch_all(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(rows)
}

fn dead_letter_table(rows: &[DeadLetter]) -> String {
    let mut t = vec![cells([
        "ID",
        "EVENT_ID",
        "TOPIC",
        "KEY",
        "ATTEMPTS",
        "DEAD_AT",
        "LAST_ERROR",
    ])];
    for r in rows {
        t.push(vec![
            r.id.to_string(),
            r.event_id.to_string(),
            clip(&r.topic, 30),
            clip(r.key.as_deref().unwrap_or("-"), 30),
            r.attempts.to_string(),
            r.dead_at.format("%Y-%m-%d %H:%M:%SZ").to_string(),
            clip(&r.last_error, 60),
        ]);
    }
    table(&t)
}
