//! Replay or purge a selection of dead letters, confirmed by its count and
//! recorded in the audit table in the same transaction.

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
    crate::ops::audit::record(&mut tx, q, actor, &name, &selection, touched).await?;
    tx.commit().await?;
    tracing::info!(actor, action = %name, count = touched, selection = %selection, "console action");
    Ok(touched)
}
