//! Halted keys: keys whose next event waits out a retry backoff or is
//! blocked (`block_topics`), with that event's error. The key's later
//! events wait behind it; other keys flow.

use chrono::{DateTime, Utc};
use postbox::sql::{statement_as, Queries};
use serde::Serialize;
use sqlx::{Connection, PgConnection};

/// One halted key and the event it waits on.
#[derive(Debug, sqlx::FromRow, Serialize)]
pub struct HaltedKey {
    /// The key.
    pub key: Option<String>,
    /// The waiting event's outbox id.
    pub id: i64,
    /// Its event id.
    pub event_id: uuid::Uuid,
    /// Its topic.
    pub topic: String,
    /// Failed attempts so far.
    pub attempts: i32,
    /// The last failure.
    pub last_error: Option<String>,
    /// Blocked until an operator acts (`block_topics`), not retried.
    pub blocked: bool,
    /// When the relay tries again (null when blocked).
    pub next_attempt_at: Option<DateTime<Utc>>,
    /// When the event was produced.
    pub created_at: DateTime<Utc>,
}

/// Up to `limit` halted keys, by key.
pub async fn halted_keys(
    conn: &mut PgConnection,
    q: &Queries,
    limit: i64,
) -> Result<Vec<HaltedKey>, crate::OpsError> {
    let mut tx = conn.begin().await?;
    let rows = statement_as(&q.outbox_halted_keys)
        .bind(limit)
        .fetch_all(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(rows)
}
