//! Versioned, idempotent schema migrations for one postbox schema.
//!
//! The migrations ship inside the library (and the `postbox` binary). Run them
//! with [`run`] / `postbox migrate`, or take [`Migration::sql`] for your own
//! migration tool: they are plain SQL with the schema name filled in.

use crate::{sql::Queries, MigrateError, SchemaName};
use sqlx::{Connection, PgConnection};

mod wake_up;

pub use crate::sql::publication_name;
use wake_up::wake_up_statements;
pub use wake_up::{wake_up_in_force, WakeUp};

/// One migration file, rendered for a schema.
#[derive(Debug, Clone)]
pub struct Migration {
    /// Version number (the file's numeric prefix).
    pub version: i32,
    /// File name without the `.sql` extension.
    pub name: &'static str,
    /// SQL with the schema filled in.
    pub sql: String,
    /// Checksum of the unrendered file; recorded when applied.
    pub checksum: String,
}

const FILES: &[(i32, &str, &str)] = &[
    (
        1,
        "0001_outbox",
        include_str!("../../sql/migrations/0001_outbox.sql"),
    ),
    (
        2,
        "0002_dead_letter",
        include_str!("../../sql/migrations/0002_dead_letter.sql"),
    ),
    (
        3,
        "0003_inbox",
        include_str!("../../sql/migrations/0003_inbox.sql"),
    ),
    (
        4,
        "0004_notify",
        include_str!("../../sql/migrations/0004_notify.sql"),
    ),
    (
        5,
        "0005_wakeup",
        include_str!("../../sql/migrations/0005_wakeup.sql"),
    ),
    (
        6,
        "0006_inbox_dead_letter",
        include_str!("../../sql/migrations/0006_inbox_dead_letter.sql"),
    ),
    (
        7,
        "0007_claim_by_partition",
        include_str!("../../sql/migrations/0007_claim_by_partition.sql"),
    ),
    (
        8,
        "0008_cheaper_row",
        include_str!("../../sql/migrations/0008_cheaper_row.sql"),
    ),
    (
        9,
        "0009_wakeup_by_lock",
        include_str!("../../sql/migrations/0009_wakeup_by_lock.sql"),
    ),
    (
        10,
        "0010_claim_by_position",
        include_str!("../../sql/migrations/0010_claim_by_position.sql"),
    ),
    (
        11,
        "0011_console",
        include_str!("../../sql/migrations/0011_console.sql"),
    ),
    (
        12,
        "0012_scheduled",
        include_str!("../../sql/migrations/0012_scheduled.sql"),
    ),
    (
        13,
        "0013_relay_health",
        include_str!("../../sql/migrations/0013_relay_health.sql"),
    ),
    (
        14,
        "0014_replay_topic",
        include_str!("../../sql/migrations/0014_replay_topic.sql"),
    ),
];

/// The migration from which relays claim from a position per partition
/// instead of from each partition's head (`0010_claim_by_position.sql`).
pub const CLAIM_BY_POSITION: i32 = 10;

/// The migrations of this build, in order, rendered for `schema`.
pub fn migrations(schema: &SchemaName) -> Vec<Migration> {
    FILES
        .iter()
        .map(|(version, name, text)| Migration {
            version: *version,
            name,
            sql: crate::sql::render(text, schema),
            checksum: checksum(text),
        })
        .collect()
}

/// Exactly what [`run`] (with `Some(notify)`) or [`upgrade`] (with `None`)
/// does to a schema that has the migrations up to `since` (0: a new schema),
/// as one SQL script for your own migration tool: the schema, the migrations
/// after `since`, each followed by its row in `postbox_migrations` (so
/// `postbox status`, the relay and a later `postbox migrate` see them), then
/// the wake-up policy. With `notify` `None` the policy is left as it is,
/// except on a new schema, which gets the default. Run it in one
/// transaction. [`WakeUp::Logical`] needs `wal_level = logical`, which `run`
/// checks and a script cannot.
pub fn script(schema: &SchemaName, notify: Option<WakeUp>, since: i32) -> String {
    let q = Queries::new(schema);
    let mut out = format!(
        "-- postbox migrations for schema {schema}{}; run in one transaction.\n",
        if since > 0 {
            format!(", after version {since}")
        } else {
            String::new()
        }
    );
    let mut push = |sql: &str| {
        let sql = sql.trim_end();
        out.push_str(sql);
        let ends_in_comment = sql
            .lines()
            .last()
            .is_some_and(|l| l.trim_start().starts_with("--"));
        // After a closing comment, the terminator goes on a line of its own.
        out.push_str(match (sql.ends_with(';'), ends_in_comment) {
            (true, _) => "\n",
            (false, false) => ";\n",
            (false, true) => "\n;\n",
        });
    };
    push(&format!("CREATE SCHEMA IF NOT EXISTS {schema}"));
    push(&q.migrations_table_create);
    for m in migrations(schema).into_iter().filter(|m| m.version > since) {
        push(&format!(
            "-- {} (version {}, checksum {})\n{}",
            m.name, m.version, m.checksum, m.sql
        ));
        // The values are a number and names of this build: safe as literals.
        push(
            &q.migrations_record
                .replace("$1", &m.version.to_string())
                .replace("$2", &format!("'{}'", m.name))
                .replace("$3", &format!("'{}'", m.checksum)),
        );
    }
    let notify = notify.or((since == 0).then(WakeUp::default));
    if let Some(notify) = notify {
        for (i, sql) in wake_up_statements(&q, notify).into_iter().enumerate() {
            if i == 0 {
                push(&format!("-- wake-up policy: {notify}\n{sql}"));
            } else {
                push(sql);
            }
        }
    }
    out
}

/// What [`run`] did.
#[derive(Debug, Clone, Default)]
pub struct Report {
    /// Versions applied by this run.
    pub applied: Vec<i32>,
    /// Versions that were already there.
    pub already: Vec<i32>,
    /// The wake-up policy in force after the run.
    pub wake_up: WakeUp,
}

/// Create or upgrade the postbox tables in `schema`, then set the wake-up policy.
///
/// Safe to run concurrently and repeatedly: an advisory lock serialises runs,
/// applied versions are skipped, and a changed migration is an error. One
/// transaction: on any error (e.g. [`MigrateError::WalLevelNotLogical`] for
/// [`WakeUp::Logical`]) nothing changes.
pub async fn run(
    conn: &mut PgConnection,
    schema: &SchemaName,
    notify: WakeUp,
) -> Result<Report, MigrateError> {
    apply(conn, schema, Some(notify)).await
}

/// [`run`], keeping the wake-up policy in force ([`WakeUp::default`] for a
/// schema that has no outbox yet).
pub async fn upgrade(conn: &mut PgConnection, schema: &SchemaName) -> Result<Report, MigrateError> {
    apply(conn, schema, None).await
}

async fn apply(
    conn: &mut PgConnection,
    schema: &SchemaName,
    notify: Option<WakeUp>,
) -> Result<Report, MigrateError> {
    let q = Queries::new(schema);
    let mut tx = conn.begin().await?;
    crate::sql::statement(&q.migrations_lock)
        .bind(schema.as_str())
        .execute(&mut *tx)
        .await?;
    let notify = match notify {
        Some(n) => n,
        None => wake_up_in_force(&mut tx, schema).await?.unwrap_or_default(),
    };
    if notify == WakeUp::Logical {
        // CREATE PUBLICATION would only warn; without logical decoding the
        // relay could never follow it. Refuse before changing anything.
        let found: String = crate::sql::statement_scalar(&q.server_wal_level)
            .fetch_one(&mut *tx)
            .await?;
        if found != "logical" {
            return Err(MigrateError::WalLevelNotLogical {
                schema: schema.to_string(),
                found,
            });
        }
    }
    let exists: bool = crate::sql::statement_scalar(&q.schema_namespace_exists)
        .bind(schema.as_str())
        .fetch_one(&mut *tx)
        .await?;
    if !exists {
        crate::sql::statement(&format!("CREATE SCHEMA {schema}"))
            .execute(&mut *tx)
            .await?;
    }
    crate::sql::statement(&q.migrations_table_create)
        .execute(&mut *tx)
        .await?;
    let applied: Vec<(i32, String, String)> = crate::sql::statement_as(&q.migrations_list)
        .fetch_all(&mut *tx)
        .await?;

    let known = migrations(schema);
    let mut report = Report::default();
    for (version, name, found) in &applied {
        match known.iter().find(|m| m.version == *version) {
            Some(m) if &m.checksum != found => {
                return Err(MigrateError::MigrationChanged {
                    schema: schema.to_string(),
                    version: *version,
                    name: name.clone(),
                    found: found.clone(),
                    expected: m.checksum.clone(),
                })
            }
            Some(_) => report.already.push(*version),
            None => {
                return Err(MigrateError::UnknownMigration {
                    schema: schema.to_string(),
                    version: *version,
                })
            }
        }
    }
    // Collected first: an iterator adaptor held across `.await` makes the
    // future not `Send` for callers that spawn it (rustc higher-ranked lifetimes).
    let pending: Vec<Migration> = known
        .into_iter()
        .filter(|m| !report.already.contains(&m.version))
        .collect();
    for m in pending {
        sqlx::raw_sql(&m.sql).execute(&mut *tx).await?;
        crate::sql::statement(&q.migrations_record)
            .bind(m.version)
            .bind(m.name)
            .bind(&m.checksum)
            .execute(&mut *tx)
            .await?;
        report.applied.push(m.version);
    }
    // Exactly one wake-up mechanism (a trigger, the publication, or none) is
    // left in place.
    for sql in wake_up_statements(&q, notify) {
        sqlx::raw_sql(sql).execute(&mut *tx).await?;
    }
    report.wake_up = notify;
    tx.commit().await?;
    Ok(report)
}

/// The schemas of this database that postbox migrated, by name; names
/// postbox would refuse (made by hand) are left out.
pub async fn migrated_schemas(conn: &mut PgConnection) -> Result<Vec<SchemaName>, sqlx::Error> {
    let names: Vec<String> =
        crate::sql::statement_scalar(include_str!("../../sql/queries/schema_list_migrated.sql"))
            .fetch_all(conn)
            .await?;
    Ok(names
        .iter()
        .filter_map(|n| SchemaName::new(n).ok())
        .collect())
}

/// Fail with [`MigrateError::SchemaNotMigrated`] unless `schema` has an outbox
/// table, and with [`MigrateError::SchemaOutdated`] unless it has every migration of
/// this build (the relay relies on the newest tables).
pub async fn ensure_migrated(
    conn: &mut PgConnection,
    schema: &SchemaName,
) -> Result<(), MigrateError> {
    let q = Queries::new(schema);
    // One transaction, so that behind a transaction pooler each statement's
    // parse and execute reach the same session (crate::sql::statement).
    let mut tx = conn.begin().await?;
    let exists: bool = crate::sql::statement_scalar(&q.schema_exists)
        .bind(schema.as_str())
        .fetch_one(&mut *tx)
        .await?;
    if !exists {
        return Err(MigrateError::SchemaNotMigrated {
            schema: schema.to_string(),
        });
    }
    let found: i32 = crate::sql::statement_scalar(&q.migrations_latest)
        .fetch_one(&mut *tx)
        .await?;
    tx.commit().await?;
    let expected = FILES.last().map_or(0, |f| f.0);
    if found < expected {
        return Err(MigrateError::SchemaOutdated {
            schema: schema.to_string(),
            found,
            expected,
        });
    }
    Ok(())
}

/// FNV-1a 64, hex: stable across builds and platforms, no dependency.
fn checksum(text: &str) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in text.as_bytes() {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{h:016x}")
}

#[cfg(test)]
mod tests;
