//! What the scenarios and the soak do to PostgreSQL and read from it: make
//! it read-only, give it a synchronous standby, end or count relay sessions,
//! wait for partition ownership.

use crate::world::World;
use postbox_testkit::PgCluster;
use std::time::{Duration, Instant};

/// Make every new transaction of the server read-only (or writable again),
/// from a session of its own that stays writable to undo it.
pub async fn read_only(url: &str, on: bool) -> Result<(), chat::Error> {
    use sqlx::Connection;
    let mut c = sqlx::PgConnection::connect(url).await?;
    sqlx::query("SET default_transaction_read_only = off")
        .execute(&mut c)
        .await?;
    let change = if on {
        "ALTER SYSTEM SET default_transaction_read_only = on"
    } else {
        "ALTER SYSTEM RESET default_transaction_read_only"
    };
    sqlx::query(change).execute(&mut c).await?;
    sqlx::query("SELECT pg_reload_conf()")
        .execute(&mut c)
        .await?;
    Ok(())
}

/// pg_terminate_backend on every session of the given relay processes.
pub async fn terminate(w: &World, pids: &[u32]) -> Result<i64, chat::Error> {
    let patterns: Vec<String> = pids
        .iter()
        .map(|p| format!("postbox-relay:{p}:%"))
        .collect();
    let n: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM (SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name LIKE ANY($1)) t",
    )
    .bind(&patterns)
    .fetch_one(&w.admin)
    .await?;
    Ok(n)
}

/// A streaming standby of `primary` that every commit waits for
/// (`synchronous_standby_names`), so what a client saw committed survives
/// the primary.
pub async fn sync_standby(primary: &PgCluster) -> Result<PgCluster, chat::Error> {
    let standby = primary.standby().await?;
    let admin = sqlx::PgPool::connect(&primary.url()).await?;
    sqlx::query("ALTER SYSTEM SET synchronous_standby_names = 'standby'")
        .execute(&admin)
        .await?;
    sqlx::query("SELECT pg_reload_conf()")
        .execute(&admin)
        .await?;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let sync: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM pg_stat_replication WHERE application_name = 'standby' AND sync_state = 'sync' AND state = 'streaming'",
        )
        .fetch_one(&admin)
        .await?;
        if sync == 1 {
            break;
        }
        if Instant::now() > deadline {
            return Err(
                "the standby did not become a streaming synchronous standby within 30 s".into(),
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    admin.close().await;
    Ok(standby)
}

/// Worker sessions of relay process `pid` the server still has.
pub async fn worker_sessions(w: &World, pid: u32) -> Result<i64, chat::Error> {
    Ok(
        sqlx::query_scalar("SELECT count(*) FROM pg_stat_activity WHERE application_name LIKE $1")
            .bind(format!("postbox-relay:{pid}:%:worker"))
            .fetch_one(&w.admin)
            .await?,
    )
}

/// Wait until the relay process `pid` holds at least `n` partitions of the consumers schema.
pub async fn wait_owned_by(
    w: &World,
    pid: u32,
    n: i64,
    timeout: Duration,
) -> Result<(), chat::Error> {
    let deadline = Instant::now() + timeout;
    loop {
        let owned: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
              WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 2
                AND l.classid::int4 = hashtext('postbox.partition.' || $1)
                AND a.application_name LIKE $2",
        )
        .bind(&w.consumers.schema)
        .bind(format!("postbox-relay:{pid}:%"))
        .fetch_one(&w.admin)
        .await?;
        if owned >= n {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(format!(
                "relay {pid} did not take {n} partitions within {timeout:?} (has {owned})"
            )
            .into());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
