//! How `postbox dlq` and `postbox inbox-dlq` print dead letters: tables, the
//! JSON of `list --json` and `show` (each side's own fields, as earlier
//! releases printed them), and the reports of a dry run and an act.

use crate::table::{cells, clip, table};
use postbox::SchemaName;
use postbox_console::ops::dead_letters::{Action, DeadLetter, Page, Side, Touched};
use serde_json::{json, Value};

/// The command of a side.
pub(super) fn command(side: Side) -> &'static str {
    match side {
        Side::Relay => "postbox dlq",
        Side::Consumer => "postbox inbox-dlq",
    }
}

/// What a side's dead letter is called.
pub(super) fn kind(side: Side) -> &'static str {
    match side {
        Side::Relay => "dead letter",
        Side::Consumer => "consumer dead letter",
    }
}

/// `list`: a table or a JSON array, and a note when the limit cut it.
pub(super) fn list(
    side: Side,
    schema: &SchemaName,
    page: &Page,
    as_json: bool,
) -> Result<(), crate::CliError> {
    if as_json {
        let rows: Vec<Value> = page.items.iter().map(json).collect();
        println!("{}", serde_json::to_string(&rows)?);
    } else if page.items.is_empty() {
        println!("no {}s in schema {schema} match", kind(side));
    } else {
        print!("{}", dead_letter_table(side, &page.items));
    }
    if page.matching > page.items.len() as i64 {
        eprintln!(
            "showing {} of {} matching dead letters; --limit 0 shows all",
            page.items.len(),
            page.matching
        );
    }
    Ok(())
}

/// One dead letter as `list --json` and `show` print it.
pub(super) fn json(d: &DeadLetter) -> Value {
    match d.side {
        Side::Relay => json!({
            "id": d.id,
            "event_id": d.message_id,
            "topic": d.topic,
            "event": d.event,
            "key": d.key,
            "payload": d.payload,
            "headers": d.headers,
            "created_at": d.created_at,
            "attempts": d.attempts,
            "last_error": d.last_error,
            "dead_at": d.dead_at,
            // The outbox already holds a row with this event_id (replay would conflict).
            "in_outbox": d.pending_elsewhere,
        }),
        Side::Consumer => json!({
            "id": d.id,
            "consumer": d.consumer,
            "message_id": d.message_id,
            "topic": d.topic,
            "name": d.event,
            "key": d.key,
            "payload": d.payload,
            "headers": d.headers,
            "source": d.source,
            "attempts": d.attempts,
            "last_error": d.last_error,
            "first_failed_at": d.first_failed_at,
            "dead_at": d.dead_at,
            // Set while a replay is asked for and no consumer has taken it yet.
            "replay_at": d.replay_at,
        }),
    }
}

/// The dry run of a replay or purge: what `--yes` would touch.
pub(super) fn dry_run(side: Side, action: Action, schema: &SchemaName, page: &Page) {
    let verb = action.as_str();
    if page.items.is_empty() {
        println!(
            "dry run: no {}s in schema {schema} match; nothing to {verb}",
            kind(side)
        );
        return;
    }
    println!(
        "dry run: would {verb} {} {}(s) of schema {schema}:",
        page.matching,
        kind(side)
    );
    print!("{}", dead_letter_table(side, &page.items));
    if page.matching > page.items.len() as i64 {
        println!("... and {} more", page.matching - page.items.len() as i64);
    }
    println!("nothing changed; run again with --yes to {verb} them");
}

/// A report's headings, and how a touched dead letter fills them.
type Columns = (&'static [&'static str], fn(&Touched) -> Vec<String>);

/// What a replay or purge touched: a line and the first `shown` rows.
pub(super) fn touched(
    side: Side,
    action: Action,
    schema: &SchemaName,
    done: &[Touched],
    shown: i64,
) {
    let n = done.len();
    match (side, action) {
        (Side::Relay, Action::Replay) => println!(
            "replayed {n} dead letter(s) into the outbox of schema {schema} (delivered after the rows of their key already waiting):"
        ),
        (Side::Consumer, Action::Replay) => println!(
            "asked for a replay of {n} consumer dead letter(s) of schema {schema}; a running consumer of each name takes them within its replay poll (`postbox inbox-dlq list` shows what is left):"
        ),
        (side, Action::Purge) => println!("purged {n} {}(s) of schema {schema}:", kind(side)),
    }
    let (head, row): Columns = match (side, action) {
        (Side::Relay, Action::Replay) => (
            &["DEAD_LETTER", "OUTBOX_ID", "EVENT_ID", "TOPIC", "KEY"],
            |t| {
                vec![
                    t.id.to_string(),
                    t.outbox_id.map_or_else(|| "-".into(), |id| id.to_string()),
                    t.message_id.clone(),
                    clip(&t.topic, 40),
                    clip(t.key.as_deref().unwrap_or("-"), 40),
                ]
            },
        ),
        (Side::Relay, Action::Purge) => (&["ID", "EVENT_ID", "TOPIC", "KEY"], |t| {
            vec![
                t.id.to_string(),
                t.message_id.clone(),
                clip(&t.topic, 40),
                clip(t.key.as_deref().unwrap_or("-"), 40),
            ]
        }),
        (Side::Consumer, _) => (&["ID", "CONSUMER", "MESSAGE_ID", "TOPIC"], |t| {
            vec![
                t.id.to_string(),
                clip(t.consumer.as_deref().unwrap_or("-"), 30),
                clip(&t.message_id, 40),
                clip(&t.topic, 30),
            ]
        }),
    };
    let mut t: Vec<Vec<String>> = vec![head.iter().map(|h| h.to_string()).collect()];
    t.extend(done.iter().take(shown as usize).map(row));
    print!("{}", table(&t));
    if n > shown as usize {
        println!("... and {} more", n - shown as usize);
    }
}

fn dead_letter_table(side: Side, rows: &[DeadLetter]) -> String {
    let dead_at = |d: &DeadLetter| d.dead_at.format("%Y-%m-%d %H:%M:%SZ").to_string();
    let mut t = match side {
        Side::Relay => vec![cells([
            "ID",
            "EVENT_ID",
            "TOPIC",
            "KEY",
            "ATTEMPTS",
            "DEAD_AT",
            "LAST_ERROR",
        ])],
        Side::Consumer => vec![cells([
            "ID",
            "CONSUMER",
            "MESSAGE_ID",
            "TOPIC",
            "ATTEMPTS",
            "DEAD_AT",
            "REPLAY",
            "LAST_ERROR",
        ])],
    };
    for d in rows {
        t.push(match side {
            Side::Relay => vec![
                d.id.to_string(),
                d.message_id.clone(),
                clip(&d.topic, 30),
                clip(d.key.as_deref().unwrap_or("-"), 30),
                d.attempts.to_string(),
                dead_at(d),
                clip(&d.last_error, 60),
            ],
            Side::Consumer => vec![
                d.id.to_string(),
                clip(d.consumer.as_deref().unwrap_or("-"), 24),
                clip(&d.message_id, 36),
                clip(&d.topic, 24),
                d.attempts.to_string(),
                dead_at(d),
                if d.replay_at.is_some() { "asked" } else { "-" }.to_owned(),
                clip(&d.last_error, 60),
            ],
        });
    }
    table(&t)
}
