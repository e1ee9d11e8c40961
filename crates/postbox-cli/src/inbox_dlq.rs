//! `postbox inbox-dlq`: the consumer side's dead letters — messages a
//! consumer's handler failed on through its whole retry policy. List and show
//! them, ask the running consumers to replay them, or purge them.
//!
//! A replay does not move anything itself: it marks the rows, and a running
//! consumer of that name takes each one and runs its handler in the
//! transaction that records the message in the inbox and deletes the row. A
//! replay that fails again leaves the row a dead letter, with the new error.

use crate::dlq::{age, Act, SHOWN};
use crate::table::{cells, clip, table};
use crate::target::{DeadLetterId, SchemaArgs};
use crate::CliError;
use chrono::{DateTime, Utc};
use humantime_serde::re::humantime;
use postbox::sql::{statement_as, Queries};
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
    /// List consumer dead letters (oldest first) as a table, or JSON with --json.
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
    /// Print one consumer dead letter in full, as JSON (the payload as JSON
    /// when it is, else as text).
    Show {
        #[command(flatten)]
        target: SchemaArgs,
        /// The dead letter's id, as `list` shows it.
        #[command(flatten)]
        id: DeadLetterId,
    },
    /// Ask the running consumers to run these messages again, through the
    /// inbox (applied at most once). A consumer picks them up within its
    /// replay poll (2 s by default); without --yes, only prints what it would
    /// replay.
    Replay {
        #[command(flatten)]
        target: SchemaArgs,
        #[command(flatten)]
        filter: Filter,
        #[command(flatten)]
        act: Act,
    },
    /// Delete consumer dead letters for good. Without --yes, only prints what
    /// it would delete.
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
    /// Only this consumer's (exact).
    #[arg(long)]
    consumer: Option<String>,
    /// Only this topic or queue (exact).
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

impl Filter {
    fn is_empty(&self) -> bool {
        self.consumer.is_none()
            && self.topic.is_none()
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
                    "--older-than {} --newer-than {} selects nothing. Did you swap them?",
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

    /// Bind the seven filter parameters ($1..$7) in the order the queries expect.
    fn bind<'q, O>(
        &'q self,
        q: sqlx::query::QueryAs<'q, sqlx::Postgres, O, sqlx::postgres::PgArguments>,
    ) -> sqlx::query::QueryAs<'q, sqlx::Postgres, O, sqlx::postgres::PgArguments> {
        q.bind(self.consumer.as_deref())
            .bind(self.topic.as_deref())
            .bind(self.key.as_deref())
            .bind(self.older_than.map(|d| d.as_secs_f64()))
            .bind(self.newer_than.map(|d| d.as_secs_f64()))
            .bind(self.error.as_deref())
            .bind((!self.ids.is_empty()).then_some(self.ids.as_slice()))
            .bind(None::<&str>) // the console's error fingerprint
    }
}

/// One consumer dead letter, as `list --json` and `show` print it.
#[derive(sqlx::FromRow, Serialize)]
struct DeadLetter {
    id: i64,
    consumer: String,
    message_id: String,
    topic: String,
    name: Option<String>,
    key: Option<String>,
    #[serde(serialize_with = "readable")]
    payload: Vec<u8>,
    headers: serde_json::Value,
    source: String,
    attempts: i32,
    last_error: String,
    first_failed_at: DateTime<Utc>,
    dead_at: DateTime<Utc>,
    /// Set while a replay is asked for and no consumer has taken it yet.
    replay_at: Option<DateTime<Utc>>,
    #[serde(skip)]
    matching: i64,
}

/// The payload as JSON when it is JSON, else as (lossy) text.
fn readable<S: serde::Serializer>(bytes: &[u8], s: S) -> Result<S::Ok, S::Error> {
    match serde_json::from_slice::<serde_json::Value>(bytes) {
        Ok(v) => v.serialize(s),
        Err(_) => String::from_utf8_lossy(bytes).serialize(s),
    }
}

#[derive(sqlx::FromRow)]
struct Selected {
    id: i64,
    consumer: String,
    message_id: String,
    topic: String,
}

pub async fn run(a: Args) -> Result<(), CliError> {
    const APP: &str = "postbox inbox-dlq";
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
            let (schema, mut conn) = target.open(APP).await?;
            let q = Queries::new(&schema);
            let rows = select(&mut conn, &q, &filter, (limit > 0).then_some(limit)).await?;
            let matching = rows.first().map_or(0, |r| r.matching);
            if json {
                println!("{}", serde_json::to_string(&rows)?);
            } else if rows.is_empty() {
                println!("no consumer dead letters in schema {schema} match");
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
            let (schema, mut conn) = target.open(APP).await?;
            let q = Queries::new(&schema);
            let filter = Filter {
                ids: vec![id],
                ..Filter::default()
            };
            let row = select(&mut conn, &q, &filter, None).await?.pop().ok_or_else(|| {
                format!("no consumer dead letter with id {id} in schema {schema}; `postbox inbox-dlq list --schema {schema}` lists them")
            })?;
            println!("{}", serde_json::to_string_pretty(&row)?);
            Ok(())
        }
        Command::Replay {
            target,
            filter,
            act,
        } => change(target, filter, act, Change::Replay).await,
        Command::Purge {
            target,
            filter,
            act,
        } => change(target, filter, act, Change::Purge).await,
    }
}

#[derive(Clone, Copy)]
enum Change {
    Replay,
    Purge,
}

async fn change(
    target: SchemaArgs,
    filter: Filter,
    act: Act,
    what: Change,
) -> Result<(), CliError> {
    let verb = match what {
        Change::Replay => "replay",
        Change::Purge => "purge",
    };
    filter.check()?;
    if filter.is_empty() && !act.all {
        return Err(format!(
            "no filter given: refusing to {verb} every consumer dead letter of schema {}. Narrow the selection with --consumer, --topic, --key, --older-than, --newer-than, --error or --id, or pass --all",
            target.schema
        )
        .into());
    }
    let (schema, mut conn) = target.open("postbox inbox-dlq").await?;
    let q = Queries::new(&schema);
    if !act.yes {
        let rows = select(&mut conn, &q, &filter, Some(SHOWN)).await?;
        let matching = rows.first().map_or(0, |r| r.matching);
        if rows.is_empty() {
            println!(
                "dry run: no consumer dead letters in schema {schema} match; nothing to {verb}"
            );
            return Ok(());
        }
        println!("dry run: would {verb} {matching} consumer dead letter(s) of schema {schema}:");
        print!("{}", dead_letter_table(&rows));
        if matching > rows.len() as i64 {
            println!("... and {} more", matching - rows.len() as i64);
        }
        println!("nothing changed; run again with --yes to {verb} them");
        return Ok(());
    }
    let sql = match what {
        Change::Replay => &q.inbox_dead_letter_replay,
        Change::Purge => &q.inbox_dead_letter_purge,
    };
    let mut tx = conn.begin().await?;
    let done: Vec<Selected> = filter.bind(statement_as(sql)).fetch_all(&mut *tx).await?;
    tx.commit().await?;
    if done.is_empty() {
        println!("no consumer dead letters in schema {schema} match; nothing to {verb}");
        return Ok(());
    }
    match what {
        Change::Replay => println!(
            "asked for a replay of {} consumer dead letter(s) of schema {schema}; a running consumer of each name takes them within its replay poll (`postbox inbox-dlq list` shows what is left):",
            done.len()
        ),
        Change::Purge => println!(
            "purged {} consumer dead letter(s) of schema {schema}:",
            done.len()
        ),
    }
    let mut t = vec![cells(["ID", "CONSUMER", "MESSAGE_ID", "TOPIC"])];
    for d in done.iter().take(SHOWN as usize) {
        t.push(vec![
            d.id.to_string(),
            clip(&d.consumer, 30),
            clip(&d.message_id, 40),
            clip(&d.topic, 30),
        ]);
    }
    print!("{}", table(&t));
    if done.len() > SHOWN as usize {
        println!("... and {} more", done.len() - SHOWN as usize);
    }
    Ok(())
}

async fn select(
    conn: &mut PgConnection,
    q: &Queries,
    filter: &Filter,
    limit: Option<i64>,
) -> Result<Vec<DeadLetter>, sqlx::Error> {
    // A transaction of its own: behind a transaction pooler, parse and
    // execute reach the same server session (postbox::sql::statement).
    let mut tx = conn.begin().await?;
    let rows = filter
        .bind(statement_as(&q.inbox_dead_letter_list))
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
        "CONSUMER",
        "MESSAGE_ID",
        "TOPIC",
        "ATTEMPTS",
        "DEAD_AT",
        "REPLAY",
        "LAST_ERROR",
    ])];
    for r in rows {
        t.push(vec![
            r.id.to_string(),
            clip(&r.consumer, 24),
            clip(&r.message_id, 36),
            clip(&r.topic, 24),
            r.attempts.to_string(),
            r.dead_at.format("%Y-%m-%d %H:%M:%SZ").to_string(),
            if r.replay_at.is_some() { "asked" } else { "-" }.to_owned(),
            clip(&r.last_error, 60),
        ]);
    }
    table(&t)
}
