//! Errors of the library: one type per kind of call, so a caller matches only
//! what that call can return, and [`Error`] gathering them all for `?`.

use crate::trace::InvalidTraceparent;

/// Any error of this library; each specific error converts into it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A schema or role name was refused ([`crate::SchemaName::new`], ...).
    #[error(transparent)]
    InvalidIdentifier(#[from] InvalidIdentifier),
    /// An outbox write failed ([`crate::Outbox::enqueue`], ...).
    #[error(transparent)]
    Enqueue(#[from] EnqueueError),
    /// An inbox write failed ([`crate::Inbox::receive`]).
    #[error(transparent)]
    Inbox(#[from] InboxError),
    /// Creating, upgrading, checking or granting a schema failed
    /// ([`crate::migrate::run`], [`crate::migrate::ensure_migrated`], [`crate::roles::grant`]).
    #[error(transparent)]
    Migrate(#[from] MigrateError),
}

/// A schema or role name failed validation; no SQL was run.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid {what} {value:?}: {reason}; use 1-63 characters of a-z, 0-9 and _, not starting with a digit")]
pub struct InvalidIdentifier {
    /// Which identifier ("schema name", "role name").
    pub what: &'static str,
    /// The refused value (shown quoted, never put into SQL).
    pub value: String,
    /// Why it was refused.
    pub reason: &'static str,
}

/// A word that is not one of the accepted choices (a wake-up policy, a role kind).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown {what} {value:?}: use {choices}")]
pub struct UnknownChoice {
    /// What was being named ("wake-up policy", ...).
    pub what: &'static str,
    /// The refused word.
    pub value: String,
    /// The accepted words, for the message.
    pub choices: &'static str,
}

/// Why an event was refused before it reached the database. Never transient:
/// the same event is refused again.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum InvalidEvent {
    /// `topic` is empty or blank.
    #[error("topic is empty")]
    EmptyTopic,
    /// `event` (the type) is empty or blank.
    #[error("event type is empty (topic {topic:?})")]
    EmptyEventType {
        /// The event's topic, to find it.
        topic: String,
    },
    /// `headers` is not a JSON object.
    #[error("headers must be a JSON object, got {found}")]
    HeadersNotAnObject {
        /// What it was ("an array", ...).
        found: &'static str,
    },
    /// The `traceparent` header is not a string.
    #[error("header traceparent must be a string, got {found}")]
    TraceparentNotAString {
        /// What it was ("a number", ...).
        found: &'static str,
    },
    /// The `traceparent` header is not a W3C trace context.
    #[error(transparent)]
    Traceparent(#[from] InvalidTraceparent),
    /// `deliver_at` is further ahead than the outbox allows
    /// ([`crate::Outbox::max_delay`]).
    #[error("deliver_at {deliver_at} is more than {max_days} days ahead; schedule it nearer, or raise Outbox::max_delay if it is meant")]
    DeliverAtTooFar {
        /// The time asked for.
        deliver_at: chrono::DateTime<chrono::Utc>,
        /// The limit, in days.
        max_days: u64,
    },
}

/// [`crate::Outbox::enqueue`] / [`crate::Outbox::enqueue_many`] failed; the
/// caller's transaction is theirs to roll back.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EnqueueError {
    /// The event was refused; no SQL was run.
    #[error("invalid event: {0}")]
    InvalidEvent(#[from] InvalidEvent),
    /// One event of an [`crate::Outbox::enqueue_many`] batch was refused; no
    /// SQL was run, so none of the batch was written.
    #[error("invalid event at index {index} of {count} (topic {topic:?}): {source}; none of the {count} events was written")]
    InvalidEventInBatch {
        /// Its position in the batch, from 0.
        index: usize,
        /// How many events the batch held.
        count: usize,
        /// Its topic, to find it.
        topic: String,
        /// Why it was refused.
        #[source]
        source: InvalidEvent,
    },
    /// The schema has no postbox tables.
    #[error(
        "schema {schema:?} has no postbox tables; run `postbox migrate --schema {schema}` first"
    )]
    SchemaNotMigrated {
        /// The schema.
        schema: String,
    },
    /// The database failed; see [`EnqueueError::is_transient`].
    #[error("database error: {0}")]
    Database(#[source] sqlx::Error),
}

impl EnqueueError {
    /// Whether running the whole transaction again may succeed (connection
    /// lost, serialization failure, server shutting down...). Invalid events
    /// and missing tables fail again.
    pub fn is_transient(&self) -> bool {
        matches!(self, EnqueueError::Database(e) if crate::consume::classify::is_transient(e))
    }
}

/// [`crate::Inbox::receive`] failed; the caller's transaction is theirs to roll back.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum InboxError {
    /// The schema has no postbox tables.
    #[error(
        "schema {schema:?} has no postbox tables; run `postbox migrate --schema {schema}` first"
    )]
    SchemaNotMigrated {
        /// The schema.
        schema: String,
    },
    /// The schema's inbox lacks a column this version writes.
    #[error("schema {schema:?} lacks what this postbox writes ({source}); run `postbox migrate --schema {schema}` first")]
    SchemaOutdated {
        /// The schema.
        schema: String,
        /// The database's refusal.
        #[source]
        source: sqlx::Error,
    },
    /// The database failed; see [`InboxError::is_transient`].
    #[error("database error: {0}")]
    Database(#[source] sqlx::Error),
}

impl InboxError {
    /// Whether running the whole transaction again may succeed.
    pub fn is_transient(&self) -> bool {
        matches!(self, InboxError::Database(e) if crate::consume::classify::is_transient(e))
    }
}

/// Setting up a schema failed: [`crate::migrate::run`] (which changes
/// nothing on error), [`crate::migrate::ensure_migrated`], [`crate::roles::grant`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum MigrateError {
    /// The schema has no postbox tables.
    #[error(
        "schema {schema:?} has no postbox tables; run `postbox migrate --schema {schema}` first"
    )]
    SchemaNotMigrated {
        /// The schema.
        schema: String,
    },
    /// The schema lacks migrations this build needs.
    #[error("schema {schema:?} is at migration {found}, this postbox needs {expected}; run `postbox migrate --schema {schema}` first")]
    SchemaOutdated {
        /// The schema.
        schema: String,
        /// Newest applied migration.
        found: i32,
        /// Newest migration of this build.
        expected: i32,
    },
    /// An applied migration differs from the one this build ships.
    #[error("migration {version} ({name}) in schema {schema:?} was applied with checksum {found}, this build has {expected}; applied migration files must not change")]
    MigrationChanged {
        /// The schema.
        schema: String,
        /// Migration version.
        version: i32,
        /// Migration name.
        name: String,
        /// Checksum recorded in the database.
        found: String,
        /// Checksum of this build's migration.
        expected: String,
    },
    /// The schema has a migration newer than this build knows.
    #[error("schema {schema:?} has migration {version}, which this postbox build does not know; upgrade postbox")]
    UnknownMigration {
        /// The schema.
        schema: String,
        /// The unknown version.
        version: i32,
    },
    /// The `logical` wake-up on a server without logical decoding.
    #[error("schema {schema:?}: the logical wake-up needs wal_level = logical, this server has wal_level = {found}; nothing was changed\n(as a superuser: ALTER SYSTEM SET wal_level = logical, then restart PostgreSQL)")]
    WalLevelNotLogical {
        /// The schema.
        schema: String,
        /// The server's `wal_level`.
        found: String,
    },
    /// The database failed.
    #[error("database error: {0}")]
    Database(#[from] sqlx::Error),
}

/// "Undefined table" or "undefined schema" on a schema's tables means it was
/// never migrated, which deserves advice rather than the server's bare
/// `relation "x.outbox" does not exist`. `Ok(schema)` in that case.
pub(crate) fn not_migrated(
    e: sqlx::Error,
    schema: &crate::SchemaName,
) -> Result<String, sqlx::Error> {
    if let sqlx::Error::Database(db) = &e {
        if matches!(db.code().as_deref(), Some("42P01" | "3F000")) {
            return Ok(schema.as_str().to_owned());
        }
    }
    Err(e)
}

impl EnqueueError {
    pub(crate) fn in_schema(e: sqlx::Error, schema: &crate::SchemaName) -> Self {
        not_migrated(e, schema).map_or_else(EnqueueError::Database, |schema| {
            EnqueueError::SchemaNotMigrated { schema }
        })
    }
}

impl InboxError {
    pub(crate) fn in_schema(e: sqlx::Error, schema: &crate::SchemaName) -> Self {
        not_migrated(e, schema).map_or_else(InboxError::Database, |schema| {
            InboxError::SchemaNotMigrated { schema }
        })
    }
}

impl MigrateError {
    pub(crate) fn in_schema(e: sqlx::Error, schema: &crate::SchemaName) -> Self {
        not_migrated(e, schema).map_or_else(MigrateError::Database, |schema| {
            MigrateError::SchemaNotMigrated { schema }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_message_fits_in_two_lines() {
        let errors: Vec<Error> = vec![
            crate::SchemaName::new("Bad-Name").unwrap_err().into(),
            EnqueueError::from(InvalidEvent::EmptyTopic).into(),
            EnqueueError::SchemaNotMigrated { schema: "s".into() }.into(),
            InboxError::SchemaNotMigrated { schema: "s".into() }.into(),
            MigrateError::SchemaOutdated {
                schema: "s".into(),
                found: 1,
                expected: 9,
            }
            .into(),
            MigrateError::MigrationChanged {
                schema: "s".into(),
                version: 1,
                name: "0001_outbox".into(),
                found: "0123456789abcdef".into(),
                expected: "fedcba9876543210".into(),
            }
            .into(),
            MigrateError::UnknownMigration {
                schema: "s".into(),
                version: 99,
            }
            .into(),
            MigrateError::WalLevelNotLogical {
                schema: "s".into(),
                found: "replica".into(),
            }
            .into(),
        ];
        for e in errors {
            let text = e.to_string();
            assert!(text.lines().count() <= 2, "{text}");
            assert!(text.lines().all(|l| l.len() <= 200), "{text}");
        }
    }
}
