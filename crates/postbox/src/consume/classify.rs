//! Whether a failed inbox transaction is the database's fault (retry it) or
//! the handler's (its retry policy applies).

use crate::consume::BoxError;
use crate::{EnqueueError, Error, InboxError, MigrateError};

/// One attempt's failure.
pub(crate) enum AttemptError {
    /// The database was unreachable, the session died, or the transaction
    /// lost a serialization race: retry.
    Database(sqlx::Error),
    /// The handler (or the data) failed.
    Handler(BoxError),
}

impl AttemptError {
    /// SQLSTATE classes 08 (connection), 53 (disk full, out of memory, too
    /// many connections), 57P01-03 (shutdown, cannot connect now),
    /// 40001/40P01 (serialization, deadlock), 25006 (the server is read-only:
    /// a standby, or `default_transaction_read_only` during maintenance), and
    /// the driver's own connection errors are transient: the database, not
    /// the message, is at fault. The rest is the handler's.
    pub(crate) fn classify(e: sqlx::Error) -> AttemptError {
        if is_transient(&e) {
            AttemptError::Database(e)
        } else {
            AttemptError::Handler(e.into())
        }
    }

    /// A handler's error: a database error inside it is classified as one.
    pub(crate) fn from_handler(e: BoxError) -> AttemptError {
        match e.downcast::<sqlx::Error>() {
            Ok(db) => AttemptError::classify(*db),
            Err(other) => match other.downcast::<EnqueueError>() {
                Ok(e) => AttemptError::from(Error::from(*e)),
                Err(other) => match other.downcast::<InboxError>() {
                    Ok(e) => AttemptError::from(Error::from(*e)),
                    Err(other) => match other.downcast::<Error>() {
                        Ok(e) => AttemptError::from(*e),
                        Err(other) => AttemptError::Handler(other),
                    },
                },
            },
        }
    }
}

/// See [`AttemptError::classify`].
pub(crate) fn is_transient(e: &sqlx::Error) -> bool {
    match e {
        sqlx::Error::Io(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::Protocol(_)
        | sqlx::Error::WorkerCrashed => true,
        sqlx::Error::Database(db) => db.code().is_some_and(|c| {
            c.starts_with("08")
                || c.starts_with("53")
                || matches!(
                    c.as_ref(),
                    "57P01" | "57P02" | "57P03" | "40001" | "40P01" | "25006"
                )
        }),
        _ => false,
    }
}

impl From<Error> for AttemptError {
    fn from(e: Error) -> Self {
        match e {
            Error::Enqueue(EnqueueError::Database(e))
            | Error::Inbox(InboxError::Database(e))
            | Error::Migrate(MigrateError::Database(e)) => AttemptError::classify(e),
            other => AttemptError::Handler(other.into()),
        }
    }
}

impl From<InboxError> for AttemptError {
    fn from(e: InboxError) -> Self {
        AttemptError::from(Error::from(e))
    }
}
