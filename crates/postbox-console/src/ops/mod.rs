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
    /// Replaying these would clash with events the outbox holds again.
    #[error("dead letter(s) {ids} have an event_id the outbox already holds again (the producer enqueued the event anew?); leave them out (purge them) and replay the rest")]
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
            OpsError::BadInput(_) | OpsError::SelectionChanged { .. } | OpsError::InOutbox { .. }
        )
    }
}
