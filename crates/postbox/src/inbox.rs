//! The consumer side: record each received message once, in the transaction of its effect.

use crate::error::{InboxError, InvalidIdentifier};
use crate::sql::{Queries, Statements};
use crate::{SchemaName, DEFAULT_SCHEMA};
use sqlx::PgConnection;
use std::sync::{Arc, OnceLock};

/// Whether a message is new to a consumer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Receipt {
    /// First time: perform the effect in this transaction, then commit.
    Fresh,
    /// Already recorded by a committed transaction: skip the effect.
    Duplicate,
}

/// The inbox of one schema.
#[derive(Debug, Clone)]
pub struct Inbox {
    pub(crate) queries: Arc<Queries>,
    schema: SchemaName,
    statements: Statements,
}

impl Inbox {
    /// The inbox in `schema` (validated here).
    pub fn new(schema: &str) -> Result<Self, InvalidIdentifier> {
        let schema = SchemaName::new(schema)?;
        Ok(Inbox {
            queries: Arc::new(Queries::new(&schema)),
            schema,
            statements: Statements::Named,
        })
    }

    /// How the receipt is prepared on your connection: [`Statements::Unnamed`]
    /// behind a pooler in transaction mode, else the default,
    /// [`Statements::Named`]. The rest of the inbox loop (dead letters, their
    /// replay) always sends unnamed statements.
    pub fn statements(mut self, statements: Statements) -> Self {
        self.statements = statements;
        self
    }

    /// Whether a consumer can use this inbox: its tables exist with every
    /// column this version writes, and the role may read them (no row is
    /// read). A consumer calls it at start so that an unmigrated schema is
    /// refused there, with advice, not at its first message.
    pub async fn check(&self, conn: &mut PgConnection) -> Result<(), InboxError> {
        crate::sql::statement_scalar::<i64>(&self.queries.inbox_tables_check)
            .fetch_one(conn)
            .await
            .map(drop)
            .map_err(|e| match &e {
                sqlx::Error::Database(db) if db.code().as_deref() == Some("42703") => {
                    InboxError::SchemaOutdated {
                        schema: self.schema.to_string(),
                        source: e,
                    }
                }
                _ => InboxError::in_schema(e, &self.schema),
            })
    }

    /// Record `message_id` for `consumer` on `conn` (pass `&mut *tx`).
    ///
    /// If another transaction is recording the same message concurrently, this
    /// waits for it: `Duplicate` if it commits, `Fresh` if it rolls back.
    pub async fn receive(
        &self,
        conn: &mut PgConnection,
        consumer: &str,
        message_id: &str,
    ) -> Result<Receipt, InboxError> {
        let done = sqlx::query(&self.queries.inbox_receive)
            .persistent(self.statements.persistent())
            .bind(consumer)
            .bind(message_id)
            .execute(conn)
            .await
            .map_err(|e| InboxError::in_schema(e, &self.schema))?;
        Ok(if done.rows_affected() == 1 {
            Receipt::Fresh
        } else {
            Receipt::Duplicate
        })
    }
}

/// [`Inbox::receive`] on the default schema ([`DEFAULT_SCHEMA`]).
pub async fn receive(
    conn: &mut PgConnection,
    consumer: &str,
    message_id: &str,
) -> Result<Receipt, InboxError> {
    static INBOX: OnceLock<Inbox> = OnceLock::new();
    INBOX
        .get_or_init(|| Inbox::new(DEFAULT_SCHEMA).expect("default schema name is valid"))
        .receive(conn, consumer, message_id)
        .await
}
