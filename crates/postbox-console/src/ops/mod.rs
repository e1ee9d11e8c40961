//! What the console shows and does, as plain functions over a connection:
//! the JSON API and the pages call these, and `postbox status` too, so every
//! face reads the same figures from the same `.sql` files.

pub mod audit;
pub mod dead_letters;
pub mod delivered;
pub mod halted;
pub mod status;

/// Why a console operation failed.
#[derive(Debug, thiserror::Error)]
pub enum OpsError {
    /// The database refused or could not be reached.
    #[error(transparent)]
    Database(#[from] sqlx::Error),
    /// The schema is not migrated, or too old for this build.
    #[error(transparent)]
    Migrate(#[from] postbox::MigrateError),
    /// A filter or selection that cannot be right; the text says why.
    #[error("{0}")]
    BadInput(String),
    /// The selection no longer holds what the operator confirmed.
    #[error("the selection changed: {confirmed} confirmed, {found} match now; review it again")]
    SelectionChanged {
        /// The count the operator saw and confirmed.
        confirmed: i64,
        /// The count that matches now.
        found: i64,
    },
    /// Neither a filter nor "all": an act on every dead letter of a side is
    /// asked for by name.
    #[error("no filter given: refusing to {action} every {side} dead letter of the schema. Narrow the selection (topic, key, age, error text, group or ids), or select them all (`--all` on the command line, `\"all\": true` in the API)")]
    NoFilter {
        /// `replay` or `purge`.
        action: &'static str,
        /// `relay` or `consumer`.
        side: &'static str,
    },
    /// The selection is empty.
    #[error("no {side} dead letters match: nothing to {action}")]
    NothingMatches {
        /// `replay` or `purge`.
        action: &'static str,
        /// `relay` or `consumer`.
        side: &'static str,
    },
    /// A producer enqueued one of the selected events again while they were
    /// being replayed.
    #[error("a dead letter's event_id was enqueued into the outbox while replaying; nothing was replayed. Run the replay again to see which")]
    EnqueuedMeanwhile,
    /// Replaying these would clash with events the outbox holds again.
    #[error("dead letter(s) {ids} have an event_id the outbox already holds again (the producer enqueued the event anew?); nothing was replayed. Leave them out (or purge them: `postbox dlq purge --id N`, or the console) and replay the rest")]
    InOutbox {
        /// The dead-letter ids, comma-separated.
        ids: String,
    },
}

impl OpsError {
    /// The caller's mistake (HTTP 4xx), rather than the server's.
    pub fn is_bad_input(&self) -> bool {
        matches!(
            self,
            OpsError::BadInput(_)
                | OpsError::NoFilter { .. }
                | OpsError::NothingMatches { .. }
                | OpsError::EnqueuedMeanwhile
                | OpsError::SelectionChanged { .. }
                | OpsError::InOutbox { .. }
        )
    }

    /// A replay's unique violation: a producer enqueued a selected event
    /// again meanwhile.
    pub(crate) fn replay_clash(e: sqlx::Error) -> OpsError {
        if e.as_database_error()
            .is_some_and(|d| d.is_unique_violation())
        {
            OpsError::EnqueuedMeanwhile
        } else {
            OpsError::Database(e)
        }
    }
}
