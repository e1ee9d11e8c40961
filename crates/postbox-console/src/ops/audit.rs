//! The audit table (migration 0011): every replay and purge made through the
//! console, with who made it, on which selection, and how many rows.

use chrono::{DateTime, Utc};
use postbox::sql::{statement_as, Queries};
use serde::Serialize;
use sqlx::{Connection, PgConnection};

/// One recorded action.
#[derive(Debug, sqlx::FromRow, Serialize)]
pub struct AuditEntry {
    /// Its id (newest highest).
    pub id: i64,
    /// When.
    pub at: DateTime<Utc>,
    /// The console user.
    pub actor: String,
    /// `dead_letters.replay`, `dead_letters.purge`,
    /// `consumer_dead_letters.replay`, `consumer_dead_letters.purge`.
    pub action: String,
    /// The filter it applied.
    pub selection: serde_json::Value,
    /// Rows it touched.
    pub count: i32,
}

/// Record an action, in the caller's transaction (the action's own).
pub async fn record(
    tx: &mut PgConnection,
    q: &Queries,
    actor: &str,
    action: &str,
    selection: &serde_json::Value,
    count: i64,
) -> Result<(), crate::OpsError> {
    postbox::sql::statement(&q.console_audit_record)
        .bind(actor)
        .bind(action)
        .bind(selection)
        .bind(i32::try_from(count).unwrap_or(i32::MAX))
        .execute(&mut *tx)
        .await?;
    Ok(())
}

/// The newest `limit` entries below id `before` (all when None).
pub async fn list(
    conn: &mut PgConnection,
    q: &Queries,
    before: Option<i64>,
    limit: i64,
) -> Result<Vec<AuditEntry>, crate::OpsError> {
    let mut tx = conn.begin().await?;
    let rows = statement_as(&q.console_audit_list)
        .bind(before)
        .bind(limit)
        .fetch_all(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(rows)
}
