//! Versioned, idempotent schema migrations for one postbox schema.
//!
//! The migrations ship inside the library (and the `postbox` binary). Run them
//! with [`run`] / `postbox migrate`, or take [`Migration::sql`] for your own
//! migration tool: they are plain SQL with the schema name filled in.

use crate::{sql::Queries, MigrateError, SchemaName, UnknownChoice};
use sqlx::{Connection, PgConnection};

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
        include_str!("../sql/migrations/0001_outbox.sql"),
    ),
    (
        2,
        "0002_dead_letter",
        include_str!("../sql/migrations/0002_dead_letter.sql"),
    ),
    (
        3,
        "0003_inbox",
        include_str!("../sql/migrations/0003_inbox.sql"),
    ),
    (
        4,
        "0004_notify",
        include_str!("../sql/migrations/0004_notify.sql"),
    ),
    (
        5,
        "0005_wakeup",
        include_str!("../sql/migrations/0005_wakeup.sql"),
    ),
    (
        6,
        "0006_inbox_dead_letter",
        include_str!("../sql/migrations/0006_inbox_dead_letter.sql"),
    ),
    (
        7,
        "0007_claim_by_partition",
        include_str!("../sql/migrations/0007_claim_by_partition.sql"),
    ),
    (
        8,
        "0008_cheaper_row",
        include_str!("../sql/migrations/0008_cheaper_row.sql"),
    ),
    (
        9,
        "0009_wakeup_by_lock",
        include_str!("../sql/migrations/0009_wakeup_by_lock.sql"),
    ),
    (
        10,
        "0010_claim_by_position",
        include_str!("../sql/migrations/0010_claim_by_position.sql"),
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

/// How producers wake the relay (DESIGN.md §3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum WakeUp {
    /// A statement-level trigger sends one NOTIFY per producer statement.
    Statement,
    /// No trigger: the relay finds new rows by polling only.
    Off,
    /// A row-level trigger at commit sends NOTIFY only while the relay worker
    /// owning the row's partition sleeps (migration 0005): busy producers
    /// mostly skip the NOTIFY and its global commit lock. The default: at 16
    /// producers it kept about twice the commit rate of `Statement`.
    #[default]
    Adaptive,
    /// No trigger: a publication of the outbox's inserts
    /// ([`publication_name`]) that the relay follows by logical decoding
    /// (pgoutput, one temporary replication slot per relay process). Producers
    /// pay no NOTIFY; needs `wal_level = logical` and a relay role with the
    /// REPLICATION attribute.
    Logical,
}

pub use crate::sql::publication_name;

impl std::str::FromStr for WakeUp {
    type Err = UnknownChoice;
    fn from_str(s: &str) -> Result<Self, UnknownChoice> {
        match s {
            "statement" => Ok(WakeUp::Statement),
            "off" => Ok(WakeUp::Off),
            "adaptive" => Ok(WakeUp::Adaptive),
            "logical" => Ok(WakeUp::Logical),
            other => Err(UnknownChoice {
                what: "notify policy",
                value: other.to_owned(),
                choices: "\"statement\", \"adaptive\", \"logical\" or \"off\"",
            }),
        }
    }
}

impl WakeUp {
    /// The name `--notify` takes and `status` shows.
    pub fn as_str(self) -> &'static str {
        match self {
            WakeUp::Statement => "statement",
            WakeUp::Off => "off",
            WakeUp::Adaptive => "adaptive",
            WakeUp::Logical => "logical",
        }
    }
}

impl std::fmt::Display for WakeUp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The wake-up policy in force on `schema`, read from what is installed (a
/// trigger, the publication, or neither); `None` when it has no outbox yet.
pub async fn wake_up_in_force(
    conn: &mut PgConnection,
    schema: &SchemaName,
) -> Result<Option<WakeUp>, sqlx::Error> {
    let found: Option<String> =
        crate::sql::statement_scalar(&Queries::new(schema).notify_policy_current)
            .bind(schema.as_str())
            .fetch_optional(&mut *conn)
            .await?
            .flatten();
    Ok(found.and_then(|f| f.parse().ok()))
}

/// The statements that leave exactly one wake-up mechanism for `notify` in
/// place (a trigger, the publication, or none): drop the others, then
/// (re)create this one.
fn wake_up_statements(q: &Queries, notify: WakeUp) -> Vec<&str> {
    match notify {
        WakeUp::Statement => vec![
            &q.notify_adaptive_drop,
            &q.notify_logical_drop,
            &q.notify_trigger_create,
        ],
        WakeUp::Adaptive => vec![
            &q.notify_trigger_drop,
            &q.notify_logical_drop,
            &q.notify_adaptive_create,
        ],
        WakeUp::Off => vec![
            &q.notify_trigger_drop,
            &q.notify_adaptive_drop,
            &q.notify_logical_drop,
        ],
        // Its file drops both triggers, then (re)creates the publication.
        WakeUp::Logical => vec![&q.notify_logical_create],
    }
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
mod tests {
    use super::*;

    #[test]
    fn versions_are_increasing_and_named_after_files() {
        let ms = migrations(&SchemaName::new("s").unwrap());
        for (i, m) in ms.iter().enumerate() {
            assert_eq!(m.version, i as i32 + 1);
            assert!(m.name.starts_with(&format!("{:04}_", m.version)));
            assert!(m.sql.contains("s."), "{}", m.name);
        }
    }

    #[test]
    fn a_script_records_each_migration_and_sets_the_policy_asked_for() {
        let s = SchemaName::new("shop").unwrap();
        let all = script(&s, None, 0);
        let last = FILES.last().unwrap().0;
        for m in migrations(&s) {
            let record = format!("VALUES ({}, '{}', '{}')", m.version, m.name, m.checksum);
            assert!(all.contains(&record), "{record}");
        }
        assert!(all.contains("CREATE TABLE IF NOT EXISTS shop.postbox_migrations"));
        assert!(
            all.ends_with("FOR EACH ROW EXECUTE FUNCTION shop.postbox_outbox_notify_adaptive();\n")
        );
        // The statement trigger of migration 0004 is dropped again.
        assert!(all.contains("DROP TRIGGER IF EXISTS outbox_notify ON shop.outbox"));

        let statement = script(&s, Some(WakeUp::Statement), 0);
        assert!(statement.contains("-- wake-up policy: statement"));
        assert!(statement.contains("DROP TRIGGER IF EXISTS outbox_notify_adaptive"));
        assert!(script(&s, Some(WakeUp::Logical), 0).contains("CREATE PUBLICATION"));

        // An upgrade script: only what comes after `since`, and the policy
        // left alone unless asked for.
        let upgrade = script(&s, None, last - 1);
        assert_eq!(
            upgrade
                .matches("INSERT INTO shop.postbox_migrations")
                .count(),
            1
        );
        assert!(!upgrade.contains("wake-up policy"));
        assert!(script(&s, Some(WakeUp::Off), last - 1).contains("wake-up policy: off"));
        assert!(script(&s, None, last).contains("postbox_migrations"));
    }

    #[test]
    fn notify_policies_parse() {
        for (text, n) in [
            ("statement", WakeUp::Statement),
            ("adaptive", WakeUp::Adaptive),
            ("logical", WakeUp::Logical),
            ("off", WakeUp::Off),
        ] {
            assert_eq!(text.parse::<WakeUp>().unwrap(), n);
            assert_eq!(n.to_string(), text);
        }
        assert!("wal"
            .parse::<WakeUp>()
            .unwrap_err()
            .to_string()
            .contains("\"logical\""));
    }
}
