//! Dead letters of both sides, the relay's (`outbox_dead_letter`) and the
//! consumers' (`inbox_dead_letter`): grouped by error fingerprint, listed a
//! page at a time, replayed or purged. The filters and statements are the
//! ones `postbox dlq` and `postbox inbox-dlq` run.

mod act;
mod filter;

pub use act::{act, count, refuse_clashes, Act, Action, Touched};
pub use filter::Filter;

use super::OpsError;
use chrono::{DateTime, Utc};
use postbox::sql::{statement_as, Queries};
use serde::{Deserialize, Serialize};
use sqlx::{Connection, PgConnection};

/// Whose dead letters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Side {
    /// Events the relay gave up on (`postbox dlq`).
    #[default]
    Relay,
    /// Messages a consumer's handler gave up on (`postbox inbox-dlq`).
    Consumer,
}

impl Side {
    /// `relay` or `consumer`.
    pub fn as_str(self) -> &'static str {
        match self {
            Side::Relay => "relay",
            Side::Consumer => "consumer",
        }
    }
}

/// Dead letters sharing one error fingerprint.
#[derive(Debug, sqlx::FromRow, Serialize)]
pub struct Group {
    /// The error with ids and numbers normalised.
    pub fingerprint: String,
    /// How many dead letters (matching the filter) have it.
    pub count: i64,
    /// The oldest one's dead-letter time.
    pub first_dead_at: DateTime<Utc>,
    /// The newest one's.
    pub last_dead_at: DateTime<Utc>,
    /// One whole error of the group.
    pub example_error: String,
    /// Up to five of its topics.
    pub topics: Vec<String>,
}

/// The largest `limit` groups of the dead letters `filter` selects.
pub async fn groups(
    conn: &mut PgConnection,
    q: &Queries,
    side: Side,
    filter: &Filter,
    limit: i64,
) -> Result<Vec<Group>, OpsError> {
    filter.check(side)?;
    let sql = match side {
        Side::Relay => &q.dead_letter_groups,
        Side::Consumer => &q.inbox_dead_letter_groups,
    };
    let mut tx = conn.begin().await?;
    let rows = filter
        .bind(side, statement_as(sql))
        .bind(limit)
        .fetch_all(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(rows)
}

/// One dead letter of either side, whole.
#[derive(Debug, Serialize)]
pub struct DeadLetter {
    /// `relay` or `consumer`.
    pub side: Side,
    /// Its dead-letter id.
    pub id: i64,
    /// The event id (relay side) or the message id (consumer side).
    pub message_id: String,
    /// The consumer that gave up (consumer side).
    pub consumer: Option<String>,
    /// Topic (relay side) or the queue/topic it came from (consumer side).
    pub topic: String,
    /// The event name.
    pub event: Option<String>,
    /// The ordering key.
    pub key: Option<String>,
    /// The payload: JSON, or text when it is not JSON (consumer side).
    pub payload: serde_json::Value,
    /// The headers.
    pub headers: serde_json::Value,
    /// Attempts made.
    pub attempts: i32,
    /// The last error.
    pub last_error: String,
    /// Its error group.
    pub fingerprint: String,
    /// When it was dead-lettered.
    pub dead_at: DateTime<Utc>,
    /// When the producer wrote it (relay side).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub created_at: Option<DateTime<Utc>>,
    /// Where the consumer got it (consumer side: its wrapper's name).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    /// When its handler first failed (consumer side).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub first_failed_at: Option<DateTime<Utc>>,
    /// When a replay was asked for that no consumer has taken yet (consumer side).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replay_at: Option<DateTime<Utc>>,
    /// Relay side: the outbox already holds its event id again, so a replay
    /// would clash. Consumer side: a replay was asked and waits for a consumer.
    pub pending_elsewhere: bool,
}

#[derive(sqlx::FromRow)]
struct RelayRow {
    id: i64,
    event_id: uuid::Uuid,
    topic: String,
    event: String,
    key: Option<String>,
    payload: serde_json::Value,
    headers: serde_json::Value,
    attempts: i32,
    last_error: String,
    created_at: DateTime<Utc>,
    dead_at: DateTime<Utc>,
    in_outbox: bool,
    fingerprint: String,
    matching: i64,
}

#[derive(sqlx::FromRow)]
struct ConsumerRow {
    id: i64,
    consumer: String,
    message_id: String,
    topic: String,
    name: Option<String>,
    key: Option<String>,
    payload: Vec<u8>,
    headers: serde_json::Value,
    source: String,
    attempts: i32,
    last_error: String,
    first_failed_at: DateTime<Utc>,
    dead_at: DateTime<Utc>,
    replay_at: Option<DateTime<Utc>>,
    fingerprint: String,
    matching: i64,
}

impl From<RelayRow> for DeadLetter {
    fn from(r: RelayRow) -> Self {
        DeadLetter {
            side: Side::Relay,
            id: r.id,
            message_id: r.event_id.to_string(),
            consumer: None,
            topic: r.topic,
            event: Some(r.event),
            key: r.key,
            payload: r.payload,
            headers: r.headers,
            attempts: r.attempts,
            last_error: r.last_error,
            fingerprint: r.fingerprint,
            dead_at: r.dead_at,
            created_at: Some(r.created_at),
            source: None,
            first_failed_at: None,
            replay_at: None,
            pending_elsewhere: r.in_outbox,
        }
    }
}

impl From<ConsumerRow> for DeadLetter {
    fn from(r: ConsumerRow) -> Self {
        DeadLetter {
            side: Side::Consumer,
            id: r.id,
            message_id: r.message_id,
            consumer: Some(r.consumer),
            topic: r.topic,
            event: r.name,
            key: r.key,
            // The payload as JSON when it is, else as (lossy) text.
            payload: serde_json::from_slice(&r.payload).unwrap_or_else(|_| {
                serde_json::Value::String(String::from_utf8_lossy(&r.payload).into_owned())
            }),
            headers: r.headers,
            attempts: r.attempts,
            last_error: r.last_error,
            fingerprint: r.fingerprint,
            dead_at: r.dead_at,
            created_at: None,
            source: Some(r.source),
            first_failed_at: Some(r.first_failed_at),
            replay_at: r.replay_at,
            pending_elsewhere: r.replay_at.is_some(),
        }
    }
}

/// A page of dead letters.
#[derive(Debug, Serialize)]
pub struct Page {
    /// The dead letters, by id.
    pub items: Vec<DeadLetter>,
    /// How many match from this page on (this page included).
    pub matching: i64,
    /// The `after` of the next page, when there is one.
    pub next_after: Option<i64>,
}

/// Up to `limit` dead letters `filter` selects with ids above `after`.
pub async fn list(
    conn: &mut PgConnection,
    q: &Queries,
    side: Side,
    filter: &Filter,
    limit: i64,
    after: Option<i64>,
) -> Result<Page, OpsError> {
    filter.check(side)?;
    let mut tx = conn.begin().await?;
    let (items, matching): (Vec<DeadLetter>, i64) = match side {
        Side::Relay => {
            let rows: Vec<RelayRow> = filter
                .bind_relay(statement_as(&q.dead_letter_list))
                .bind(limit)
                .bind(after)
                .fetch_all(&mut *tx)
                .await?;
            let matching = rows.first().map_or(0, |r| r.matching);
            (rows.into_iter().map(DeadLetter::from).collect(), matching)
        }
        Side::Consumer => {
            let rows: Vec<ConsumerRow> = filter
                .bind_consumer(statement_as(&q.inbox_dead_letter_list))
                .bind(limit)
                .bind(after)
                .fetch_all(&mut *tx)
                .await?;
            let matching = rows.first().map_or(0, |r| r.matching);
            (rows.into_iter().map(DeadLetter::from).collect(), matching)
        }
    };
    tx.commit().await?;
    let next_after = (items.len() as i64 == limit && matching > limit)
        .then(|| items.last().map(|d| d.id))
        .flatten();
    Ok(Page {
        items,
        matching,
        next_after,
    })
}

/// One dead letter by id.
pub async fn get(
    conn: &mut PgConnection,
    q: &Queries,
    side: Side,
    id: i64,
) -> Result<Option<DeadLetter>, OpsError> {
    let filter = Filter {
        ids: vec![id],
        ..Filter::default()
    };
    Ok(list(conn, q, side, &filter, 1, None).await?.items.pop())
}
