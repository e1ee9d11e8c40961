//! Dead letters of both sides, the relay's (`outbox_dead_letter`) and the
//! consumers' (`inbox_dead_letter`): grouped by error fingerprint, listed a
//! page at a time, replayed or purged. The filters and statements are the
//! ones `postbox dlq` and `postbox inbox-dlq` run.

use super::OpsError;
use chrono::{DateTime, Utc};
use postbox::sql::{statement_as, Queries};
use serde::{Deserialize, Serialize};
use sqlx::postgres::PgArguments;
use sqlx::query::QueryAs;
use sqlx::{Connection, PgConnection, Postgres};

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

/// Which dead letters: every given filter must hold. Empty strings count as
/// not given (an HTML form sends every field).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(default, deny_unknown_fields)]
pub struct Filter {
    /// Only this consumer (consumer side only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub consumer: Option<String>,
    /// Only this topic.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub topic: Option<String>,
    /// Only this key.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// Only those dead-lettered more than this many seconds ago.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub older_than_seconds: Option<f64>,
    /// Only those dead-lettered less than this many seconds ago.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub newer_than_seconds: Option<f64>,
    /// Only those whose last error contains this text (case-insensitive).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Only those of this error group.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fingerprint: Option<String>,
    /// Only these dead-letter ids.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub ids: Vec<i64>,
}

fn given(s: &Option<String>) -> Option<&str> {
    s.as_deref().filter(|s| !s.is_empty())
}

impl Filter {
    /// Nothing narrows the selection.
    pub fn is_empty(&self) -> bool {
        given(&self.consumer).is_none()
            && given(&self.topic).is_none()
            && given(&self.key).is_none()
            && self.older_than_seconds.is_none()
            && self.newer_than_seconds.is_none()
            && given(&self.error).is_none()
            && given(&self.fingerprint).is_none()
            && self.ids.is_empty()
    }

    /// Refuse what cannot be meant, naming the field.
    pub fn check(&self, side: Side) -> Result<(), OpsError> {
        if side == Side::Relay && given(&self.consumer).is_some() {
            return Err(OpsError::BadInput(
                "consumer filters consumer dead letters only: use side=consumer, or leave it out"
                    .into(),
            ));
        }
        for (name, v) in [
            ("older_than_seconds", self.older_than_seconds),
            ("newer_than_seconds", self.newer_than_seconds),
        ] {
            if let Some(v) = v {
                if !v.is_finite() || v <= 0.0 {
                    return Err(OpsError::BadInput(format!(
                        "{name} must be a number of seconds above 0, not {v}"
                    )));
                }
            }
        }
        if let (Some(old), Some(new)) = (self.older_than_seconds, self.newer_than_seconds) {
            if old >= new {
                return Err(OpsError::BadInput(format!(
                    "older_than_seconds {old} and newer_than_seconds {new} select nothing (a dead letter would be older than {old} s and newer than {new} s); did you swap them?"
                )));
            }
        }
        if self.ids.len() > 10_000 {
            return Err(OpsError::BadInput(
                "at most 10000 ids at once: select a group or a filter instead".into(),
            ));
        }
        Ok(())
    }

    /// The filter parameters in the order the relay-side statements expect ($1..$7).
    fn bind_relay<'q, O>(
        &'q self,
        q: QueryAs<'q, Postgres, O, PgArguments>,
    ) -> QueryAs<'q, Postgres, O, PgArguments> {
        q.bind(given(&self.topic))
            .bind(given(&self.key))
            .bind(self.older_than_seconds)
            .bind(self.newer_than_seconds)
            .bind(given(&self.error))
            .bind((!self.ids.is_empty()).then_some(self.ids.as_slice()))
            .bind(given(&self.fingerprint))
    }

    /// The filter parameters of the consumer-side statements ($1..$8).
    fn bind_consumer<'q, O>(
        &'q self,
        q: QueryAs<'q, Postgres, O, PgArguments>,
    ) -> QueryAs<'q, Postgres, O, PgArguments> {
        q.bind(given(&self.consumer))
            .bind(given(&self.topic))
            .bind(given(&self.key))
            .bind(self.older_than_seconds)
            .bind(self.newer_than_seconds)
            .bind(given(&self.error))
            .bind((!self.ids.is_empty()).then_some(self.ids.as_slice()))
            .bind(given(&self.fingerprint))
    }

    fn bind<'q, O>(
        &'q self,
        side: Side,
        q: QueryAs<'q, Postgres, O, PgArguments>,
    ) -> QueryAs<'q, Postgres, O, PgArguments> {
        match side {
            Side::Relay => self.bind_relay(q),
            Side::Consumer => self.bind_consumer(q),
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
    attempts: i32,
    last_error: String,
    dead_at: DateTime<Utc>,
    replay_at: Option<DateTime<Utc>>,
    fingerprint: String,
    matching: i64,
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
    let (items, matching) = match side {
        Side::Relay => {
            let rows: Vec<RelayRow> = filter
                .bind_relay(statement_as(&q.dead_letter_list))
                .bind(limit)
                .bind(after)
                .fetch_all(&mut *tx)
                .await?;
            let matching = rows.first().map_or(0, |r| r.matching);
            let items: Vec<DeadLetter> = rows
                .into_iter()
                .map(|r| DeadLetter {
                    side,
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
                    pending_elsewhere: r.in_outbox,
                })
                .collect();
            (items, matching)
        }
        Side::Consumer => {
            let rows: Vec<ConsumerRow> = filter
                .bind_consumer(statement_as(&q.inbox_dead_letter_list))
                .bind(limit)
                .bind(after)
                .fetch_all(&mut *tx)
                .await?;
            let matching = rows.first().map_or(0, |r| r.matching);
            let items: Vec<DeadLetter> = rows
                .into_iter()
                .map(|r| DeadLetter {
                    side,
                    id: r.id,
                    message_id: r.message_id,
                    consumer: Some(r.consumer),
                    topic: r.topic,
                    event: r.name,
                    key: r.key,
                    payload: serde_json::from_slice(&r.payload).unwrap_or_else(|_| {
                        serde_json::Value::String(String::from_utf8_lossy(&r.payload).into_owned())
                    }),
                    headers: r.headers,
                    attempts: r.attempts,
                    last_error: r.last_error,
                    fingerprint: r.fingerprint,
                    dead_at: r.dead_at,
                    pending_elsewhere: r.replay_at.is_some(),
                })
                .collect();
            (items, matching)
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

/// What to do with a selection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Action {
    /// Back into the outbox (relay side), or run again by the consumer.
    Replay,
    /// Delete for good.
    Purge,
}

impl Action {
    /// `replay` or `purge`.
    pub fn as_str(self) -> &'static str {
        match self {
            Action::Replay => "replay",
            Action::Purge => "purge",
        }
    }
}

/// How many dead letters `filter` selects now.
pub async fn count(
    conn: &mut PgConnection,
    q: &Queries,
    side: Side,
    filter: &Filter,
) -> Result<i64, OpsError> {
    Ok(list(conn, q, side, filter, 1, None).await?.matching)
}

/// Replay or purge what `filter` selects, in one transaction with its audit
/// row. `confirmed` is the count the operator saw: when the selection holds
/// another count now, nothing is done. An empty filter selects everything
/// only with `all`.
#[allow(clippy::too_many_arguments)]
pub async fn act(
    conn: &mut PgConnection,
    q: &Queries,
    side: Side,
    action: Action,
    filter: &Filter,
    all: bool,
    confirmed: Option<i64>,
    actor: &str,
) -> Result<i64, OpsError> {
    filter.check(side)?;
    if filter.is_empty() && !all {
        return Err(OpsError::BadInput(format!(
            "no filter given: refusing to {} every {} dead letter; choose a group, ids or a filter, or set all",
            action.as_str(),
            side.as_str()
        )));
    }
    let mut tx = conn.begin().await?;
    let found = count(&mut tx, q, side, filter).await?;
    if let Some(confirmed) = confirmed {
        if confirmed != found {
            return Err(OpsError::SelectionChanged { confirmed, found });
        }
    }
    if found == 0 {
        return Err(OpsError::BadInput(format!(
            "no {} dead letters match: nothing to {}",
            side.as_str(),
            action.as_str()
        )));
    }
    if (side, action) == (Side::Relay, Action::Replay) {
        let clashing: Vec<i64> = list(&mut tx, q, side, filter, found, None)
            .await?
            .items
            .iter()
            .filter(|d| d.pending_elsewhere)
            .map(|d| d.id)
            .collect();
        if !clashing.is_empty() {
            let ids: Vec<String> = clashing.iter().map(i64::to_string).collect();
            return Err(OpsError::InOutbox {
                ids: ids.join(", "),
            });
        }
    }
    let sql = match (side, action) {
        (Side::Relay, Action::Replay) => &q.dead_letter_replay,
        (Side::Relay, Action::Purge) => &q.dead_letter_purge,
        (Side::Consumer, Action::Replay) => &q.inbox_dead_letter_replay,
        (Side::Consumer, Action::Purge) => &q.inbox_dead_letter_purge,
    };
    let done: Vec<(i64,)> = filter
        .bind(side, statement_as::<(i64,)>(sql))
        .fetch_all(&mut *tx)
        .await?;
    let touched = done.len() as i64;
    let name = match side {
        Side::Relay => format!("dead_letters.{}", action.as_str()),
        Side::Consumer => format!("consumer_dead_letters.{}", action.as_str()),
    };
    let mut selection = serde_json::to_value(filter).unwrap_or_default();
    if all {
        selection["all"] = serde_json::Value::Bool(true);
    }
    super::audit::record(&mut tx, q, actor, &name, &selection, touched).await?;
    tx.commit().await?;
    tracing::info!(actor, action = %name, count = touched, selection = %selection, "console action");
    Ok(touched)
}
