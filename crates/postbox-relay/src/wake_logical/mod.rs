//! `--notify logical`: wake the workers of schemas whose outbox is published
//! (`postbox migrate --notify logical`) by following the outbox's inserts
//! through logical decoding, instead of a NOTIFY from the producers' commits.
//!
//! One replication session per relay process, whatever the number of such
//! schemas: it creates a TEMPORARY logical slot (`pgoutput`, no snapshot) on
//! itself, so the server drops the slot when the session ends, for whatever
//! reason, and a dead relay never leaves a slot that retains WAL. It then
//! streams the schemas' publications. pgoutput sends only transactions that
//! inserted into a published outbox (PostgreSQL 15+ skips the others; older
//! servers send them empty, and an empty one wakes nobody): at each commit the
//! schemas whose outbox got an insert are woken, and the commit's end LSN is
//! reported as applied at once, so the slot never holds WAL back. Nothing is
//! read from the decoded rows: the workers claim from the table, as always.
//!
//! A wake-up lost while the session is down is made up for the same way as
//! the listener's: once streaming again, every logical schema's workers are
//! woken to rescan; meanwhile polling delivers. Errors name what to fix (the
//! REPLICATION attribute, wal_level, slot limits) and never show the password.

pub(crate) mod decoder;
mod session;
mod target;

use crate::wake::WakeTx;
use crate::{Backoff, Config};
use pgwire_replication::PgWireError;
use postbox::{sql::Queries, SchemaName};
use session::Session;
use sqlx::PgConnection;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use target::ReplicationTarget;
use tokio_util::sync::CancellationToken;

/// Which of `schemas` have their outbox published for `--notify logical`.
pub(crate) async fn published(
    conn: &mut PgConnection,
    schemas: &[SchemaName],
) -> Result<Vec<SchemaName>, sqlx::Error> {
    let mut out = Vec::new();
    for schema in schemas {
        let yes: bool = sqlx::query_scalar(&Queries::new(schema).publication_exists)
            .bind(schema.as_str())
            .fetch_one(&mut *conn)
            .await?;
        if yes {
            out.push(schema.clone());
        }
    }
    Ok(out)
}

/// Follow the publications of `schemas` and bump their `wakers` until
/// `shutdown`; reconnect (with backoff) after any failure.
pub(crate) async fn follow(
    config: Arc<Config>,
    app_name: String,
    schemas: Vec<SchemaName>,
    wakers: HashMap<String, WakeTx>,
    shutdown: CancellationToken,
) {
    let target = match ReplicationTarget::parse(&config.database_url) {
        Ok(t) => t,
        Err(e) => {
            tracing::error!(url = %config.database_url, schemas = ?schemas, "logical wake-up off: {e}; the relay delivers by polling (every {})", humantime_serde::re::humantime::format_duration(config.poll_interval));
            return;
        }
    };
    let backoff = Backoff {
        min: Duration::from_millis(100),
        max: Duration::from_secs(5),
    };
    let mut failures = 0u32;
    let mut schemas = schemas;
    while !shutdown.is_cancelled() {
        let mut session = Session {
            config: &config,
            target: &target,
            app_name: &app_name,
            wakers: &wakers,
            shutdown: &shutdown,
            streaming: false,
        };
        let result = session.run(&mut schemas).await;
        if session.streaming {
            failures = 0;
        }
        let delay = match result {
            Ok(Ended::Shutdown) => return,
            Ok(Ended::NothingPublished) => {
                tracing::info!("no schema of this relay is published for logical wake-up any more (its policy changed); logical wake-up stops, NOTIFY and polling remain");
                return;
            }
            Err(e) => {
                let (message, lasting) = explain(&e, &target.user, &config);
                if lasting {
                    tracing::error!(schemas = ?schemas, "{message}");
                } else {
                    tracing::warn!(schemas = ?schemas, error = %message, "logical wake-up stream failed; polling meanwhile, reconnecting");
                }
                // A setting an operator must change: look again now and then,
                // without filling the log.
                if lasting {
                    Duration::from_secs(30)
                } else {
                    backoff.delay(failures)
                }
            }
        };
        failures = failures.saturating_add(1);
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(delay) => {}
        }
    }
}

/// Why a session ended without an error.
pub(super) enum Ended {
    Shutdown,
    NothingPublished,
}

/// Why a session failed.
#[derive(Debug)]
pub(super) enum StreamError {
    /// The relay's role may not open a replication session.
    NoReplicationAttribute,
    /// The server cannot decode (someone lowered wal_level after migrating).
    WalLevel(String),
    Sql(sqlx::Error),
    Stream(PgWireError),
    Ended,
}

/// The message to log for `e`, and whether an operator must act (as opposed
/// to a passing network or server failure).
fn explain(e: &StreamError, user: &str, config: &Config) -> (String, bool) {
    let poll = humantime_serde::re::humantime::format_duration(config.poll_interval);
    let grant = format!(
        "the relay's role {user:?} lacks the REPLICATION attribute, which `--notify logical` needs for its replication session: run `ALTER ROLE {user} REPLICATION` as a superuser (and allow it in pg_hba.conf like its other connections); until then the relay delivers by polling (every {poll})"
    );
    match e {
        StreamError::NoReplicationAttribute => (grant, true),
        StreamError::WalLevel(found) => (
            format!("`--notify logical` needs wal_level = logical, but the server now has wal_level = {found}: run `ALTER SYSTEM SET wal_level = logical` as a superuser and restart PostgreSQL; until then the relay delivers by polling (every {poll})"),
            true,
        ),
        StreamError::Sql(e) => (format!("database error: {e}"), false),
        StreamError::Ended => ("the server ended the replication stream".into(), false),
        StreamError::Stream(e) => {
            let text = e.to_string();
            if text.contains("SQLSTATE 42501") {
                (grant, true)
            } else if text.contains("SQLSTATE 53400") {
                (format!("{text}: every replication slot or WAL sender is in use; raise max_replication_slots / max_wal_senders (each relay process with `--notify logical` uses one of each); polling (every {poll}) delivers meanwhile"), true)
            } else if text.contains("unsupported auth method code: 5") {
                (format!("the server asks for md5 password authentication, which the logical wake-up does not speak: use scram-sha-256 for the relay's role (password_encryption = scram-sha-256, set its password again, and scram-sha-256 in pg_hba.conf); polling (every {poll}) delivers meanwhile"), true)
            } else {
                (text, false)
            }
        }
    }
}

impl From<sqlx::Error> for StreamError {
    fn from(e: sqlx::Error) -> Self {
        StreamError::Sql(e)
    }
}
impl From<PgWireError> for StreamError {
    fn from(e: PgWireError) -> Self {
        StreamError::Stream(e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Secret;

    #[test]
    fn errors_say_what_to_grant_and_never_the_password() {
        let config = Config {
            database_url: Secret::new("postgres://relay:canary-pw@h/db"),
            ..Config::default()
        };
        let (m, lasting) = explain(
            &StreamError::Stream(PgWireError::Server(
                "must be superuser or replication role to start walsender (SQLSTATE 42501)".into(),
            )),
            "relay",
            &config,
        );
        assert!(lasting);
        assert!(m.contains("ALTER ROLE relay REPLICATION"), "{m}");
        assert!(!m.contains("canary-pw"));
        let (m, _) = explain(&StreamError::WalLevel("replica".into()), "relay", &config);
        assert!(m.contains("wal_level = logical"), "{m}");
    }
}
