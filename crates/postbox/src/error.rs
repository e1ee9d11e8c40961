//! Errors of the producer/consumer library.

/// What went wrong in a postbox library call.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A schema (or other) identifier failed validation; no SQL was run.
    #[error("invalid {what} {value:?}: {reason}. Use 1-63 characters of a-z, 0-9 and _, not starting with a digit")]
    InvalidIdentifier {
        /// Which identifier ("schema name", ...).
        what: &'static str,
        /// The rejected value (shown quoted, never interpolated into SQL).
        value: String,
        /// Why it was rejected.
        reason: &'static str,
    },
    /// An event was rejected before reaching the database.
    #[error("invalid event: {0}")]
    InvalidEvent(String),
    /// An event's `traceparent` header is not a W3C trace context.
    #[error("invalid event: {0}")]
    InvalidTraceparent(#[from] crate::trace::InvalidTraceparent),
    /// The schema has no postbox tables.
    #[error(
        "schema {schema:?} has no postbox tables; run `postbox migrate --schema {schema}` first"
    )]
    SchemaNotMigrated {
        /// The schema that was looked up.
        schema: String,
    },
    /// The schema lacks migrations this build needs.
    #[error("schema {schema:?} is at migration {found}, this postbox needs {expected}; run `postbox migrate --schema {schema}` first")]
    SchemaOutdated {
        /// Schema.
        schema: String,
        /// Newest applied migration.
        found: i32,
        /// Newest migration of this build.
        expected: i32,
    },
    /// An applied migration differs from the one this version ships.
    #[error("migration {version} ({name}) in schema {schema:?} was applied with a different checksum ({found}, expected {expected}); the migration files must not change once applied")]
    MigrationChanged {
        /// Schema.
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
    /// The database has migrations newer than this build knows.
    #[error("schema {schema:?} has migration {version} which this postbox build does not know; upgrade postbox")]
    UnknownMigration {
        /// Schema.
        schema: String,
        /// The unknown version.
        version: i32,
    },
    /// `--notify logical` on a server without logical decoding.
    #[error("schema {schema:?}: `--notify logical` needs the server setting wal_level = logical, but this server has wal_level = {found}. A superuser can run `ALTER SYSTEM SET wal_level = logical` and then restart PostgreSQL (the setting takes effect only at server start); nothing was changed, the schema keeps its current wake-up policy")]
    WalLevelNotLogical {
        /// Schema.
        schema: String,
        /// The server's `wal_level`.
        found: String,
    },
    /// A database error.
    #[error("database error: {0}")]
    Database(#[from] sqlx::Error),
}

impl Error {
    /// A query on `schema`'s tables failed: "undefined table" or "undefined
    /// schema" means the schema was never migrated, which deserves advice
    /// rather than the server's bare `relation "x.outbox" does not exist`.
    pub(crate) fn in_schema(e: sqlx::Error, schema: &crate::SchemaName) -> Error {
        if let sqlx::Error::Database(db) = &e {
            if matches!(db.code().as_deref(), Some("42P01" | "3F000")) {
                return Error::SchemaNotMigrated {
                    schema: schema.as_str().to_owned(),
                };
            }
        }
        Error::Database(e)
    }
}
