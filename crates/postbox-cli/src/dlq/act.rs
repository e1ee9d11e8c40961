//! `postbox dlq replay` and `purge`: a dry run by default, then the move
//! back into the outbox or the delete, each reported row by row.

use super::filter::{selection, Act, Filter};
use super::{dead_letter_table, select, DeadLetter, SHOWN};
use crate::table::{cells, clip, table};
use crate::target::SchemaArgs;
use crate::CliError;
use postbox::sql::{statement_as, Queries};
use postbox::SchemaName;
use sqlx::{Connection, PgConnection};

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

pub(super) async fn replay(target: SchemaArgs, filter: Filter, act: Act) -> Result<(), CliError> {
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

pub(super) async fn purge(target: SchemaArgs, filter: Filter, act: Act) -> Result<(), CliError> {
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
