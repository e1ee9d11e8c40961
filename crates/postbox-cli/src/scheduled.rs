//! `postbox scheduled`: the events scheduled ahead (`Event::deliver_at`)
//! that are not yet due, and cancelling one before it is.

use crate::table::{cells, clip, table};
use crate::target::SchemaArgs;
use crate::CliError;
use chrono::{DateTime, SecondsFormat, Utc};
use postbox::sql::{statement_as, Queries};
use postbox::Outbox;
use sqlx::Connection;

#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    command: Command,
}

#[derive(clap::Subcommand)]
enum Command {
    /// List scheduled events not yet due, soonest first.
    List {
        #[command(flatten)]
        target: SchemaArgs,
        /// Only this topic.
        #[arg(long)]
        topic: Option<String>,
        /// Show at most this many.
        #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(i64).range(1..))]
        limit: i64,
    },
    /// Cancel scheduled events before they are due: they will never be delivered.
    Cancel {
        #[command(flatten)]
        target: SchemaArgs,
        /// The event id given when it was scheduled (repeat for several).
        #[arg(long = "event-id", value_name = "UUID", required = true)]
        event_ids: Vec<uuid::Uuid>,
    },
}

#[derive(sqlx::FromRow)]
struct Scheduled {
    event_id: uuid::Uuid,
    topic: String,
    event: String,
    key: Option<String>,
    deliver_at: DateTime<Utc>,
    created_at: DateTime<Utc>,
    matching: i64,
}

fn at(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Millis, true)
}

pub async fn run(a: Args) -> Result<(), CliError> {
    match a.command {
        Command::List {
            target,
            topic,
            limit,
        } => {
            let (schema, mut conn) = target.open("postbox scheduled").await?;
            let q = Queries::new(&schema);
            let mut tx = conn.begin().await?;
            let rows: Vec<Scheduled> = statement_as(&q.outbox_scheduled_list)
                .bind(topic.as_deref())
                .bind(limit)
                .fetch_all(&mut *tx)
                .await?;
            tx.commit().await?;
            if rows.is_empty() {
                println!("no scheduled events in schema {schema} wait to be due");
                return Ok(());
            }
            let mut t = vec![cells([
                "EVENT_ID",
                "TOPIC",
                "EVENT",
                "KEY",
                "DELIVER_AT",
                "CREATED_AT",
            ])];
            for r in &rows {
                t.push(vec![
                    r.event_id.to_string(),
                    clip(&r.topic, 30),
                    clip(&r.event, 30),
                    clip(r.key.as_deref().unwrap_or("-"), 30),
                    at(r.deliver_at),
                    at(r.created_at),
                ]);
            }
            print!("{}", table(&t));
            let matching = rows[0].matching;
            if matching > rows.len() as i64 {
                eprintln!("showing {} of {matching}; --limit shows more", rows.len());
            }
            Ok(())
        }
        Command::Cancel { target, event_ids } => {
            let (schema, mut conn) = target.open("postbox scheduled").await?;
            let outbox = Outbox::new(schema.as_str())?.statements(postbox::Statements::Unnamed);
            // All or none: one transaction, and an id that is not waiting
            // (unknown, cancelled, or already due) fails it.
            let mut tx = conn.begin().await?;
            for id in &event_ids {
                if !outbox.cancel(&mut tx, *id).await? {
                    return Err(format!(
                        "no scheduled event {id} waits in schema {schema}: unknown, already cancelled, or already due and delivered or being delivered; nothing was cancelled (`postbox scheduled list --schema {schema}` shows what waits)"
                    )
                    .into());
                }
            }
            tx.commit().await?;
            println!(
                "cancelled {} scheduled event(s) of schema {schema}: they will not be delivered",
                event_ids.len()
            );
            Ok(())
        }
    }
}
