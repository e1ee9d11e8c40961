//! `postbox replay`: send retained events again, so a consumer that was not
//! there (a new service, a rebuilt read model) gets the history.
//!
//! Relays with `sent = "mark"` keep each sent row for `outbox_retention`; a
//! replay makes a selection of them unsent again, in place, a chunk per
//! transaction, and the running relay sends them as it sends new events. They
//! keep their event ids, so a consumer that already applied one skips it in
//! its inbox. A dry run by default; paced by the relay (or a fixed rate,
//! [`pace`]); stops cleanly at SIGINT or SIGTERM after the chunk in flight and
//! prints how to resume.

mod follow;
mod pace;

use crate::table::{cells, table};
use crate::target::SchemaArgs;
use crate::CliError;
use chrono::{DateTime, SecondsFormat, Utc};
use humantime_serde::re::humantime;
use postbox::sql::{statement, statement_as, statement_scalar, Queries};
use postbox::SchemaName;
use sqlx::{Connection, PgConnection};
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

use follow::Pacer;
use pace::Rate;

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    target: SchemaArgs,
    /// Only events created at or after this: an RFC 3339 time
    /// (2026-12-07T10:00:00Z) or how long ago (90m, 2h, 3d).
    #[arg(long, value_parser = when)]
    since: When,
    /// Only events created before this, in the same forms (default: now).
    #[arg(long, value_parser = when)]
    until: Option<When>,
    /// Only events of this topic (repeat for several).
    #[arg(long = "topic", value_name = "TOPIC")]
    topics: Vec<String>,
    /// Only events of this key.
    #[arg(long)]
    key: Option<String>,
    /// Send them to this topic instead of their own: a destination of its
    /// own for a new consumer (another queue, stream, subject, or webhook URL
    /// through `{topic}`), leaving the live one alone. Default: their own.
    #[arg(long, value_name = "TOPIC")]
    to_topic: Option<String>,
    /// How fast: auto (follow the relay: the next chunk once it sent the
    /// previous one, so live events keep their latency), or at most this
    /// many events a second (0: as fast as the database takes them).
    #[arg(long, value_name = "auto|EVENTS_PER_SECOND", default_value = "auto", value_parser = pace::rate)]
    rate: Rate,
    /// Events made unsent again per transaction (with --rate auto, at most
    /// this many: chunks are sized to the relay's pace).
    #[arg(long, default_value_t = 500, value_parser = clap::value_parser!(i64).range(1..=10_000))]
    chunk: i64,
    /// Resume an interrupted replay: only events with ids above this one (a
    /// replay prints it as it goes).
    #[arg(long, value_name = "ID", default_value_t = 0)]
    after_id: i64,
    /// Replay. Without it, only print what would be replayed.
    #[arg(long)]
    yes: bool,
}

/// A point in time as given: absolute, or a duration before the database's now.
#[derive(Clone, Debug)]
enum When {
    At(DateTime<Utc>),
    Ago(Duration),
}

fn when(s: &str) -> Result<When, String> {
    if let Ok(t) = DateTime::parse_from_rfc3339(s.trim()) {
        return Ok(When::At(t.with_timezone(&Utc)));
    }
    match humantime::parse_duration(s.trim()) {
        Ok(d) if !d.is_zero() => Ok(When::Ago(d)),
        _ => Err(format!(
            "{s:?} is neither an RFC 3339 time (2026-12-07T10:00:00Z) nor a duration ago (90m, 2h, 3d)"
        )),
    }
}

impl When {
    fn resolve(&self, now: DateTime<Utc>) -> Result<DateTime<Utc>, CliError> {
        Ok(match self {
            When::At(t) => *t,
            When::Ago(d) => {
                now - chrono::Duration::from_std(*d).map_err(|_| "duration too long")?
            }
        })
    }
}

/// The selection, with its times resolved once against the database's clock,
/// so a resumed replay selects exactly what the first one did.
struct Selection {
    since: DateTime<Utc>,
    until: DateTime<Utc>,
    topics: Option<Vec<String>>,
    key: Option<String>,
    /// Where they go (`--to-topic`); `None`: their own topics.
    to_topic: Option<String>,
}

#[derive(sqlx::FromRow)]
struct TopicPlan {
    topic: String,
    events: i64,
    first_id: i64,
    last_id: i64,
    first_created_at: DateTime<Utc>,
    last_created_at: DateTime<Utc>,
}

/// `s` as one word of a POSIX shell command line: as it is when it holds
/// nothing a shell reads specially, else in single quotes.
fn shell_word(s: &str) -> String {
    let plain = |c: char| c.is_ascii_alphanumeric() || "._-:/@%+=,".contains(c);
    if !s.is_empty() && s.chars().all(plain) {
        s.to_owned()
    } else {
        format!("'{}'", s.replace('\'', "'\\''"))
    }
}

fn at(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(SecondsFormat::Millis, true)
}

pub async fn run(a: Args, shutdown: CancellationToken) -> Result<(), CliError> {
    check_flags(&a)?;
    let (schema, mut conn) = a.target.open("postbox replay").await?;
    let q = Queries::new(&schema);
    let sel = selection(&mut conn, &a).await?;
    let plan = plan(&mut conn, &q, &sel, a.after_id).await?;
    let total: i64 = plan.iter().map(|p| p.events).sum();
    if total == 0 {
        return Err(nothing_retained(&mut conn, &q, &schema, &sel).await);
    }
    print_plan(&schema, &sel, &plan, total, a.yes);
    if !a.yes {
        let pace = match a.rate {
            Rate::Auto => "as fast as the relay sends them beside live events".to_string(),
            Rate::Fixed(0) => "as fast as the database takes them".to_string(),
            Rate::Fixed(rate) => format!(
                "at {rate} events/s, about {}",
                postbox::display_duration(Duration::from_secs_f64(total as f64 / rate as f64))
            ),
        };
        println!("dry run: nothing changed; run again with --yes to send them again ({pace})");
        return Ok(());
    }
    let done = send_again(&mut conn, &q, &schema, &sel, &a, total, &shutdown).await?;
    if done.interrupted {
        return Err(format!(
            "interrupted after {} of {total} events (through id {}); resume with:\n  {}",
            done.replayed,
            done.through,
            resume_command(&schema, &sel, a.rate, done.through)
        )
        .into());
    }
    println!(
        "replayed {} event(s) of schema {schema} in {}: the relay sends them {}as it sends new events",
        done.replayed,
        postbox::display_duration(done.took),
        sel.to_topic
            .as_ref()
            .map_or(String::new(), |t| format!("to topic {t:?} "))
    );
    Ok(())
}

/// Refuse empty names before connecting.
fn check_flags(a: &Args) -> Result<(), CliError> {
    if a.topics.iter().any(|t| t.is_empty()) {
        return Err("--topic must not be empty".into());
    }
    if a.key.as_deref() == Some("") {
        return Err("--key must not be empty: leave it out to replay every key".into());
    }
    if a.to_topic.as_deref().is_some_and(|t| t.trim().is_empty()) {
        return Err(
            "--to-topic must not be empty: leave it out to replay to each event's own topic".into(),
        );
    }
    Ok(())
}

/// The flags' selection, its times resolved on the database's clock.
async fn selection(conn: &mut PgConnection, a: &Args) -> Result<Selection, CliError> {
    let mut tx = conn.begin().await?;
    let now: DateTime<Utc> = statement_scalar("SELECT now()").fetch_one(&mut *tx).await?;
    tx.commit().await?;
    let sel = Selection {
        since: a.since.resolve(now)?,
        until: a.until.as_ref().map_or(Ok(now), |u| u.resolve(now))?,
        topics: (!a.topics.is_empty()).then(|| a.topics.clone()),
        key: a.key.clone(),
        to_topic: a.to_topic.clone(),
    };
    if sel.since >= sel.until {
        return Err(format!(
            "--since {} is not before --until {}: the range holds nothing; did you swap them?",
            at(sel.since),
            at(sel.until)
        )
        .into());
    }
    if sel.until > now {
        return Err(format!(
            "--until {} is after the database's now ({}): leave --until out to replay up to now",
            at(sel.until),
            at(now)
        )
        .into());
    }
    Ok(sel)
}

/// Why a selection holds nothing: what is retained, and for how long.
async fn nothing_retained(
    conn: &mut PgConnection,
    q: &Queries,
    schema: &SchemaName,
    sel: &Selection,
) -> CliError {
    let oldest = async {
        let mut tx = conn.begin().await?;
        let oldest: Option<DateTime<Utc>> = statement_scalar(&q.outbox_retained_oldest)
            .fetch_optional(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok::<_, sqlx::Error>(oldest)
    };
    let retained = match oldest.await {
        Ok(Some(t)) => format!("the oldest sent event retained was created at {}", at(t)),
        Ok(None) => "no sent events are retained at all".into(),
        Err(e) => return e.into(),
    };
    format!(
        "no sent events of schema {schema} created from {} to {}{}{} are retained to replay ({retained}). Relays keep sent events for outbox_retention (1h by default) with sent = \"mark\", and none with sent = \"delete\"",
        at(sel.since),
        at(sel.until),
        sel.topics.as_ref().map_or(String::new(), |t| format!(" of topic(s) {}", t.join(", "))),
        sel.key.as_ref().map_or(String::new(), |k| format!(" with key {k:?}")),
    )
    .into()
}

/// The command that resumes an interrupted replay after id `through`.
fn resume_command(schema: &SchemaName, sel: &Selection, rate: Rate, through: i64) -> String {
    // Microseconds, as PostgreSQL keeps them: the same selection exactly.
    let exact = |t: DateTime<Utc>| t.to_rfc3339_opts(SecondsFormat::Micros, true);
    let mut cmd = format!(
        "postbox replay --schema {schema} --since {} --until {}",
        exact(sel.since),
        exact(sel.until)
    );
    for t in sel.topics.iter().flatten() {
        cmd.push_str(&format!(" --topic {}", shell_word(t)));
    }
    if let Some(k) = &sel.key {
        cmd.push_str(&format!(" --key {}", shell_word(k)));
    }
    if let Some(t) = &sel.to_topic {
        cmd.push_str(&format!(" --to-topic {}", shell_word(t)));
    }
    cmd.push_str(&format!(" --rate {rate} --after-id {through} --yes"));
    cmd
}

/// Per topic, what the selection holds from `after_id` on.
async fn plan(
    conn: &mut PgConnection,
    q: &Queries,
    sel: &Selection,
    after_id: i64,
) -> Result<Vec<TopicPlan>, sqlx::Error> {
    let mut tx = conn.begin().await?;
    let rows = statement_as(&q.outbox_replay_plan)
        .bind(sel.since)
        .bind(sel.until)
        .bind(sel.topics.as_deref())
        .bind(sel.key.as_deref())
        .bind(after_id)
        .fetch_all(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(rows)
}

fn print_plan(schema: &SchemaName, sel: &Selection, plan: &[TopicPlan], total: i64, yes: bool) {
    let to = match &sel.to_topic {
        Some(t) => format!(" to topic {t:?} instead of their own"),
        None => String::new(),
    };
    println!(
        "{} {total} retained event(s) of schema {schema} created from {} to {}{to}:",
        if yes { "replaying" } else { "would replay" },
        at(sel.since),
        at(sel.until)
    );
    let mut t = vec![cells([
        "TOPIC",
        "EVENTS",
        "IDS",
        "FIRST_CREATED_AT",
        "LAST_CREATED_AT",
    ])];
    for p in plan {
        t.push(vec![
            p.topic.clone(),
            p.events.to_string(),
            format!("{}..{}", p.first_id, p.last_id),
            at(p.first_created_at),
            at(p.last_created_at),
        ]);
    }
    print!("{}", table(&t));
}

struct Done {
    replayed: i64,
    through: i64,
    took: Duration,
    interrupted: bool,
}

/// Chunk after chunk, each its own transaction (with a NOTIFY that wakes
/// sleeping relays at its commit), paced by `--rate`, until the selection is
/// exhausted or shutdown is asked.
async fn send_again(
    conn: &mut PgConnection,
    q: &Queries,
    schema: &SchemaName,
    sel: &Selection,
    a: &Args,
    total: i64,
    shutdown: &CancellationToken,
) -> Result<Done, CliError> {
    let start = Instant::now();
    let mut pacer = Pacer::new(conn, q, a.rate, a.chunk).await?;
    let mut done = Done {
        replayed: 0,
        through: a.after_id,
        took: Duration::ZERO,
        interrupted: false,
    };
    let mut last_report = Instant::now();
    while !shutdown.is_cancelled() {
        let size = pacer.size();
        let Some(ids) = next_chunk(conn, q, schema, sel, &mut done, size).await? else {
            break;
        };
        let pause = pacer
            .after_chunk(conn, q, schema, &ids, done.replayed, shutdown)
            .await?;
        tokio::select! {
            _ = tokio::time::sleep(pause) => {}
            _ = shutdown.cancelled() => {}
        }
        pacer.after_pause(conn, q, pause).await?;
        // After the pause: the rate counts the time these took too.
        if last_report.elapsed() >= Duration::from_secs(1) {
            last_report = Instant::now();
            progress(&done, total, start.elapsed(), &pacer.following());
        }
    }
    done.interrupted = shutdown.is_cancelled();
    done.took = start.elapsed();
    Ok(done)
}

/// The progress line, every second.
fn progress(done: &Done, total: i64, took: Duration, following: &str) {
    let secs = took.as_secs_f64().max(0.001);
    eprintln!(
        "replayed {} of {total} ({:.0} %) at {:.0} events/s{following}, through id {} (to resume: --after-id {})",
        done.replayed,
        100.0 * done.replayed as f64 / total.max(1) as f64,
        done.replayed as f64 / secs,
        done.through,
        done.through
    );
}

/// Make the next `size` rows of the selection unsent again, in one
/// transaction; `None` once the selection is exhausted, else the ids made
/// unsent (none if the chunk's rows were unsent already).
async fn next_chunk(
    conn: &mut PgConnection,
    q: &Queries,
    schema: &SchemaName,
    sel: &Selection,
    done: &mut Done,
    size: i64,
) -> Result<Option<Vec<i64>>, CliError> {
    let mut tx = conn.begin().await?;
    let (through, replayed, ids): (Option<i64>, i64, Vec<i64>) =
        statement_as(&q.outbox_replay_chunk)
            .bind(sel.since)
            .bind(sel.until)
            .bind(sel.topics.as_deref())
            .bind(sel.key.as_deref())
            .bind(done.through)
            .bind(size)
            .bind(sel.to_topic.as_deref())
            .fetch_one(&mut *tx)
            .await?;
    let Some(through) = through else {
        return Ok(None);
    };
    if replayed > 0 {
        statement(&q.outbox_wake)
            .bind(schema.as_str())
            .execute(&mut *tx)
            .await?;
    }
    tx.commit().await?;
    done.replayed += replayed;
    done.through = through;
    Ok(Some(ids))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_are_rfc3339_or_a_duration_ago() {
        assert!(
            matches!(when("2026-12-07T10:00:00Z"), Ok(When::At(t)) if t.to_rfc3339() == "2026-12-07T10:00:00+00:00")
        );
        assert!(matches!(when("2h"), Ok(When::Ago(d)) if d == Duration::from_secs(7200)));
        let e = when("yesterday").unwrap_err();
        assert!(e.contains("\"yesterday\"") && e.contains("RFC 3339"), "{e}");
        assert!(when("0s").is_err());
    }

    #[test]
    fn resume_commands_quote_what_a_shell_would_split() {
        assert_eq!(shell_word("orders.v2"), "orders.v2");
        assert_eq!(shell_word("customer 42"), "'customer 42'");
        assert_eq!(shell_word("it's"), "'it'\\''s'");
        assert_eq!(shell_word("$HOME"), "'$HOME'");
    }
}
