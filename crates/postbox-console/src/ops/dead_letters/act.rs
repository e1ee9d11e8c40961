//! Replay or purge a selection of dead letters, confirmed by its count and
//! recorded in the audit table in the same transaction: what the console's
//! pages and API, `postbox dlq` and `postbox inbox-dlq` all run.

use super::{list, Filter, Side};
use crate::ops::OpsError;
use postbox::sql::{statement_as, Queries};
use serde::{Deserialize, Serialize};
use sqlx::{Connection, PgConnection};

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

/// One replay or purge, as an operator asked for it.
#[derive(Debug, Clone, Copy)]
pub struct Act<'a> {
    /// Whose dead letters.
    pub side: Side,
    /// Replay or purge.
    pub action: Action,
    /// Which of them.
    pub filter: &'a Filter,
    /// An empty filter selects every dead letter of the side only with this.
    pub all: bool,
    /// The count the operator saw: when the selection holds another count
    /// now, nothing is done (`None`: no count was shown).
    pub confirmed: Option<i64>,
}

/// One dead letter a replay or purge touched.
#[derive(Debug, Clone, Serialize)]
pub struct Touched {
    /// Its dead-letter id.
    pub id: i64,
    /// The event id (relay side) or the message id (consumer side).
    pub message_id: String,
    /// Its topic (relay side) or the queue/topic it came from (consumer side).
    pub topic: String,
    /// Its key (relay side).
    pub key: Option<String>,
    /// The consumer that gave up (consumer side).
    pub consumer: Option<String>,
    /// Its new outbox id (relay side, replayed).
    pub outbox_id: Option<i64>,
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

/// Replay or purge what `act` selects, in one transaction with its audit
/// row naming `actor`: the dead letters touched, in id order.
pub async fn act(
    conn: &mut PgConnection,
    q: &Queries,
    act: &Act<'_>,
    actor: &str,
) -> Result<Vec<Touched>, OpsError> {
    let Act {
        side,
        action,
        filter,
        all,
        confirmed,
    } = *act;
    filter.check_act(side, action, all)?;
    let mut tx = conn.begin().await?;
    let found = count(&mut tx, q, side, filter).await?;
    if let Some(confirmed) = confirmed {
        if confirmed != found {
            return Err(OpsError::SelectionChanged { confirmed, found });
        }
    }
    if found == 0 {
        return Err(OpsError::NothingMatches {
            action: action.as_str(),
            side: side.as_str(),
        });
    }
    if (side, action) == (Side::Relay, Action::Replay) {
        refuse_clashes(&mut tx, q, filter, found).await?;
    }
    let touched = run(&mut tx, q, side, action, filter).await?;
    let name = match side {
        Side::Relay => format!("dead_letters.{}", action.as_str()),
        Side::Consumer => format!("consumer_dead_letters.{}", action.as_str()),
    };
    let mut selection = serde_json::to_value(filter).unwrap_or_default();
    if all {
        selection["all"] = serde_json::Value::Bool(true);
    }
    let n = touched.len() as i64;
    crate::ops::audit::record(&mut tx, q, actor, &name, &selection, n).await?;
    tx.commit().await?;
    tracing::info!(actor, action = %name, count = n, selection = %selection, "dead letters acted on");
    Ok(touched)
}

/// A relay-side replay of dead letters whose event id the outbox holds again
/// would break the outbox's unique event id: refuse it, naming them (`found`:
/// how many `filter` selects).
pub async fn refuse_clashes(
    tx: &mut PgConnection,
    q: &Queries,
    filter: &Filter,
    found: i64,
) -> Result<(), OpsError> {
    let clashing: Vec<String> = list(tx, q, Side::Relay, filter, found, None)
        .await?
        .items
        .iter()
        .filter(|d| d.pending_elsewhere)
        .map(|d| d.id.to_string())
        .collect();
    if clashing.is_empty() {
        return Ok(());
    }
    Err(OpsError::InOutbox {
        ids: clashing.join(", "),
    })
}

#[derive(sqlx::FromRow)]
struct RelayReplayed {
    dead_letter_id: i64,
    outbox_id: i64,
    event_id: uuid::Uuid,
    topic: String,
    key: Option<String>,
}

#[derive(sqlx::FromRow)]
struct RelayPurged {
    id: i64,
    event_id: uuid::Uuid,
    topic: String,
    key: Option<String>,
}

#[derive(sqlx::FromRow)]
struct ConsumerTouched {
    id: i64,
    consumer: String,
    message_id: String,
    topic: String,
}

/// The statement of `side` and `action`, and what it returned.
async fn run(
    tx: &mut PgConnection,
    q: &Queries,
    side: Side,
    action: Action,
    filter: &Filter,
) -> Result<Vec<Touched>, OpsError> {
    let mut touched: Vec<Touched> = match (side, action) {
        (Side::Relay, Action::Replay) => filter
            .bind_relay(statement_as::<RelayReplayed>(&q.dead_letter_replay))
            .fetch_all(&mut *tx)
            .await
            .map_err(OpsError::replay_clash)?
            .into_iter()
            .map(|r| Touched {
                id: r.dead_letter_id,
                message_id: r.event_id.to_string(),
                topic: r.topic,
                key: r.key,
                consumer: None,
                outbox_id: Some(r.outbox_id),
            })
            .collect(),
        (Side::Relay, Action::Purge) => filter
            .bind_relay(statement_as::<RelayPurged>(&q.dead_letter_purge))
            .fetch_all(&mut *tx)
            .await?
            .into_iter()
            .map(|r| Touched {
                id: r.id,
                message_id: r.event_id.to_string(),
                topic: r.topic,
                key: r.key,
                consumer: None,
                outbox_id: None,
            })
            .collect(),
        (Side::Consumer, action) => {
            let sql = match action {
                Action::Replay => &q.inbox_dead_letter_replay,
                Action::Purge => &q.inbox_dead_letter_purge,
            };
            filter
                .bind_consumer(statement_as::<ConsumerTouched>(sql))
                .fetch_all(&mut *tx)
                .await?
                .into_iter()
                .map(|r| Touched {
                    id: r.id,
                    message_id: r.message_id,
                    topic: r.topic,
                    key: None,
                    consumer: Some(r.consumer),
                    outbox_id: None,
                })
                .collect()
        }
    };
    touched.sort_by_key(|t| t.id);
    Ok(touched)
}
