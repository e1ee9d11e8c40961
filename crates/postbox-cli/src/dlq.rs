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
use humantime_serde::re::humantime;
use postbox::sql::{statement_as, Queries};
use postbox::SchemaName;
use serde::Serialize;
use sqlx::{Connection, PgConnection};
use std::time::Duration;

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

/// Which dead letters; filters combine with AND.
#[derive(clap::Args, Default)]
struct Filter {
    /// Only this topic (exact).
    #[arg(long)]
    topic: Option<String>,
    /// Only this key (exact).
    #[arg(long)]
    key: Option<String>,
    /// Only those dead-lettered more than this long ago (e.g. 30m, 1h, 2d).
    #[arg(long, value_name = "AGE", value_parser = age)]
    older_than: Option<Duration>,
    /// Only those dead-lettered less than this long ago (e.g. 10m).
    #[arg(long, value_name = "AGE", value_parser = age)]
    newer_than: Option<Duration>,
    /// Only those whose last_error contains this text (case-insensitive).
    #[arg(long, value_name = "TEXT")]
    error: Option<String>,
    /// Only these dead-letter ids (repeat for several).
    #[arg(long = "id", value_name = "ID")]
    ids: Vec<i64>,
}

#[derive(clap::Args)]
pub(crate) struct Act {
    /// Act; without it the command is a dry run that prints what it would do.
    #[arg(long)]
    pub(crate) yes: bool,
    /// Select every dead letter of the schema (required when no filter is given).
    #[arg(long, conflicts_with_all = ["topic", "key", "older_than", "newer_than", "error", "ids"])]
    pub(crate) all: bool,
}

pub(crate) fn age(s: &str) -> Result<Duration, String> {
    let d = humantime::parse_duration(s.trim()).map_err(|_| {
        format!("{s:?} is not a duration: give a number and a unit, e.g. 90s, 10m, 1h, 2d")
    })?;
    if d.is_zero() {
        return Err("the duration must be more than 0 (e.g. 10m)".into());
    }
    Ok(d)
}

impl Filter {
    fn is_empty(&self) -> bool {
        self.topic.is_none()
            && self.key.is_none()
            && self.older_than.is_none()
            && self.newer_than.is_none()
            && self.error.is_none()
            && self.ids.is_empty()
    }

    fn check(&self) -> Result<(), CliError> {
        if let (Some(old), Some(new)) = (self.older_than, self.newer_than) {
            if old >= new {
                return Err(format!(
                    "--older-than {} --newer-than {} selects nothing: a dead letter would have to be older than {0} and newer than {1}. Did you swap them?",
                    humantime::format_duration(old),
                    humantime::format_duration(new)
                )
                .into());
            }
        }
        if self.error.as_deref() == Some("") {
            return Err("--error needs some text to look for in last_error".into());
        }
        Ok(())
    }

    /// Bind the six filter parameters ($1..$6) in the order the queries expect.
    fn bind<'q, O>(
        &'q self,
        q: sqlx::query::QueryAs<'q, sqlx::Postgres, O, sqlx::postgres::PgArguments>,
    ) -> sqlx::query::QueryAs<'q, sqlx::Postgres, O, sqlx::postgres::PgArguments> {
        q.bind(self.topic.as_deref())
            .bind(self.key.as_deref())
            .bind(self.older_than.map(|d| d.as_secs_f64()))
            .bind(self.newer_than.map(|d| d.as_secs_f64()))
            .bind(self.error.as_deref())
            .bind((!self.ids.is_empty()).then_some(self.ids.as_slice()))
    }
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

#[derive(sqlx::FromRow)]
struct Replayed {
    dead_letter_id: i64,
    outbox_id: i64,
    event_id: uuid::Uuid,
    topic: String,
    key: Option<String>,
}

#[derive(sqlx::FromRow)]
struct Purged {
    id: i64,
    event_id: uuid::Uuid,
    topic: String,
    key: Option<String>,
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
        .fetch_all(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(rows)
}

/// Refuse an unfiltered replay/purge unless `--all`; filters are checked too.
fn selection(what: &str, schema: &str, filter: &Filter, act: &Act) -> Result<(), CliError> {
    filter.check()?;
    if filter.is_empty() && !act.all {
        return Err(format!(
            "no filter given: refusing to {what} every dead letter of schema {schema}. Narrow the selection with --topic, --key, --older-than, --newer-than, --error or --id, or pass --all"
        )
        .into());
    }
    Ok(())
}

/// The dry run: what would be selected, and how to act on it.
async fn preview(
    conn: &mut PgConnection,
    q: &Queries,
    schema: &SchemaName,
    filter: &Filter,
    verb: &str,
) -> Result<(), CliError> {
    let rows = select(conn, q, filter, Some(SHOWN)).await?;
    let matching = rows.first().map_or(0, |r| r.matching);
    if rows.is_empty() {
        println!("dry run: no dead letters in schema {schema} match; nothing to {verb}");
        return Ok(());
    }
    println!("dry run: would {verb} {matching} dead letter(s) of schema {schema}:");
    print!("{}", dead_letter_table(&rows));
    if matching > rows.len() as i64 {
        println!("... and {} more", matching - rows.len() as i64);
    }
    println!("nothing changed; run again with --yes to {verb} them");
    Ok(())
}

async fn replay(target: SchemaArgs, filter: Filter, act: Act) -> Result<(), CliError> {
    selection("replay", &target.schema, &filter, &act)?;
    let (schema, mut conn) = target.open("postbox dlq").await?;
    let q = Queries::new(&schema);
    let conflicts = |rows: &[DeadLetter], outcome: &str| -> Result<(), CliError> {
        let ids: Vec<String> = rows
            .iter()
            .filter(|r| r.in_outbox)
            .map(|r| r.id.to_string())
            .collect();
        if ids.is_empty() {
            return Ok(());
        }
        Err(format!(
            "dead letter(s) {} of schema {schema} have an event_id the outbox already holds again (the producer enqueued the event anew?); {outcome}. Leave them out (e.g. purge them with `postbox dlq purge --schema {schema} --id N --yes`) and replay the rest",
            ids.join(", ")
        )
        .into())
    };
    if !act.yes {
        preview(&mut conn, &q, &schema, &filter, "replay").await?;
        // Say now what --yes would refuse.
        return conflicts(
            &select(&mut conn, &q, &filter, None).await?,
            "--yes would replay nothing",
        );
    }
    let mut tx = conn.begin().await?;
    conflicts(
        &select(&mut tx, &q, &filter, None).await?,
        "nothing was replayed",
    )?;
    let moved: Vec<Replayed> = filter
        .bind(statement_as(&q.dead_letter_replay))
        .fetch_all(&mut *tx)
        .await
        .map_err(|e| -> CliError {
            if e.as_database_error()
                .is_some_and(|d| d.is_unique_violation())
            {
                format!("a dead letter's event_id was enqueued into the outbox of schema {schema} while replaying; nothing was replayed. Run the replay again to see which")
                    .into()
            } else {
                e.into()
            }
        })?;
    tx.commit().await?;
    if moved.is_empty() {
        println!("no dead letters in schema {schema} match; nothing replayed");
        return Ok(());
    }
    println!(
        "replayed {} dead letter(s) into the outbox of schema {schema} (delivered after the rows of their key already waiting):",
        moved.len()
    );
    let mut t = vec![cells([
        "DEAD_LETTER",
        "OUTBOX_ID",
        "EVENT_ID",
        "TOPIC",
        "KEY",
    ])];
    for m in moved.iter().take(SHOWN as usize) {
        t.push(vec![
            m.dead_letter_id.to_string(),
            m.outbox_id.to_string(),
            m.event_id.to_string(),
            clip(&m.topic, 40),
            clip(m.key.as_deref().unwrap_or("-"), 40),
        ]);
    }
    print!("{}", table(&t));
    if moved.len() > SHOWN as usize {
        println!("... and {} more", moved.len() - SHOWN as usize);
    }
    Ok(())
}

async fn purge(target: SchemaArgs, filter: Filter, act: Act) -> Result<(), CliError> {
    selection("purge", &target.schema, &filter, &act)?;
    let (schema, mut conn) = target.open("postbox dlq").await?;
    let q = Queries::new(&schema);
    if !act.yes {
        return preview(&mut conn, &q, &schema, &filter, "purge").await;
    }
    let mut tx = conn.begin().await?;
    let gone: Vec<Purged> = filter
        .bind(statement_as(&q.dead_letter_purge))
        .fetch_all(&mut *tx)
        .await?;
    tx.commit().await?;
    if gone.is_empty() {
        println!("no dead letters in schema {schema} match; nothing purged");
        return Ok(());
    }
    println!("purged {} dead letter(s) of schema {schema}:", gone.len());
    let mut t = vec![cells(["ID", "EVENT_ID", "TOPIC", "KEY"])];
    for g in gone.iter().take(SHOWN as usize) {
        t.push(vec![
            g.id.to_string(),
            g.event_id.to_string(),
            clip(&g.topic, 40),
            clip(g.key.as_deref().unwrap_or("-"), 40),
        ]);
    }
    print!("{}", table(&t));
    if gone.len() > SHOWN as usize {
        println!("... and {} more", gone.len() - SHOWN as usize);
    }
    Ok(())
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ages_parse_or_say_what_is_expected() {
        assert_eq!(age("1h").unwrap(), Duration::from_secs(3600));
        assert_eq!(age("10m").unwrap(), Duration::from_secs(600));
        assert_eq!(age("2d").unwrap(), Duration::from_secs(172_800));
        let e = age("yesterday").unwrap_err();
        assert!(e.contains("\"yesterday\"") && e.contains("1h"), "{e}");
        assert!(age("0s").is_err());
    }

    #[test]
    fn swapped_ages_are_refused() {
        let f = Filter {
            older_than: Some(Duration::from_secs(3600)),
            newer_than: Some(Duration::from_secs(600)),
            ..Filter::default()
        };
        assert!(f.check().unwrap_err().to_string().contains("swap"));
    }
}
