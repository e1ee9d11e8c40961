//! The wake-up policies: how producers wake the relay, which one a schema
//! has, and the statements that install one.

use crate::{sql::Queries, SchemaName, UnknownChoice};
use sqlx::PgConnection;

/// How producers wake the relay (docs: concepts/wake-up.md, and why in
/// architecture.md).
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
    /// ([`publication_name`](super::publication_name)) that the relay follows by logical decoding
    /// (pgoutput, one temporary replication slot per relay process). Producers
    /// pay no NOTIFY; needs `wal_level = logical` and a relay role with the
    /// REPLICATION attribute.
    Logical,
}

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
pub(super) fn wake_up_statements(q: &Queries, notify: WakeUp) -> Vec<&str> {
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
