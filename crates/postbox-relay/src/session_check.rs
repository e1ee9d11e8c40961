//! What the relay needs of its PostgreSQL sessions, checked before it
//! starts: sessions of its own, not shared per transaction by a pooler,
//! on a server that takes writes.
//!
//! A worker's session holds state between transactions: advisory locks on
//! its partitions and its membership, `LISTEN`, its settings
//! (`relay_session_limits.sql`) and its prepared claims. A pooler in
//! transaction mode (PgBouncer's `pool_mode = transaction`, RDS Proxy, most
//! hosted PostgreSQL's default URL) hands the server session to another
//! client after each transaction, so two relays could own one partition.
//! There is no protocol flag for it; what gives it away is the backend pid:
//! in a session of its own it never changes, and two open sessions never
//! share one. The statements go by the simple protocol, which a pooler in
//! any mode passes through.

use postbox::sql::Queries;
use postbox::Servers;
use sqlx::{Connection, Executor, PgConnection, Row};
use std::time::Duration;

/// What one look at a session found (`session_facts.sql`).
struct Facts {
    pid: i32,
    in_recovery: bool,
    read_only: bool,
}

async fn facts(conn: &mut PgConnection, q: &Queries) -> Result<Facts, sqlx::Error> {
    // A statement without arguments goes by the simple protocol.
    let row = conn.fetch_one(q.session_facts.as_str()).await?;
    Ok(Facts {
        pid: row.try_get(0)?,
        in_recovery: row.try_get(1)?,
        read_only: row.try_get(2)?,
    })
}

/// Why the relay's sessions cannot be used.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Unfit {
    /// The sessions go through a pooler in transaction mode.
    Pooled {
        /// What showed it.
        evidence: String,
    },
    /// The server does not take writes.
    ReadOnly {
        /// Why (a standby, or `default_transaction_read_only`).
        why: &'static str,
    },
}

/// Open two sessions and look at them across transactions. `Ok(None)`:
/// fit for a relay.
pub(crate) async fn check(
    servers: &Servers,
    q: &Queries,
    timeout: Duration,
) -> Result<Option<Unfit>, sqlx::Error> {
    let mut a = servers.connect("postbox-relay:preflight", timeout).await?;
    let first = facts(&mut a, q).await?;
    if first.in_recovery || first.read_only {
        let _ = a.close().await;
        let why = if first.in_recovery {
            "a standby (pg_is_in_recovery() is true)"
        } else {
            "read-only (default_transaction_read_only is on)"
        };
        return Ok(Some(Unfit::ReadOnly { why }));
    }
    // A pooler in transaction mode gives the server session `a` just
    // released to the next client that needs one (PgBouncer: the most
    // recently used first), and `a` another one for its next transaction.
    let mut b = servers.connect("postbox-relay:preflight", timeout).await?;
    let other = facts(&mut b, q).await?;
    let again = facts(&mut a, q).await?;
    let _ = b.close().await;
    let _ = a.close().await;
    Ok(judge(first.pid, other.pid, again.pid).map(|evidence| Unfit::Pooled { evidence }))
}

/// `a1`, `a2`: the backend pid of one session in two transactions; `b`: of
/// another session open meanwhile.
fn judge(a1: i32, b: i32, a2: i32) -> Option<String> {
    if a1 != a2 {
        Some(format!(
            "one session's backend changed between two transactions (pid {a1}, then {a2})"
        ))
    } else if a1 == b {
        Some(format!(
            "two open sessions were served by the same backend (pid {a1})"
        ))
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::judge;

    #[test]
    fn a_session_of_its_own_keeps_its_backend_and_shares_it_with_none() {
        assert_eq!(judge(10, 11, 10), None);
        assert!(judge(10, 11, 12).unwrap().contains("pid 10, then 12"));
        assert!(judge(10, 10, 12).unwrap().contains("changed"));
        assert!(judge(10, 10, 10).unwrap().contains("same backend (pid 10)"));
    }
}
