//! The relay's wake-up locks as `pg_locks` shows them (migration 0009): which
//! partitions sleep armed, and by how many sessions.

/// Armed locks of `schema` held: (how many, by how many sessions).
async fn armed(pool: &sqlx::PgPool, schema: &str) -> (i64, i64) {
    sqlx::query_as(
        "SELECT count(*), count(DISTINCT pid) FROM pg_locks
          WHERE locktype = 'advisory' AND granted AND mode = 'ExclusiveLock'
            AND objsubid = 2 AND classid = hashtext('postbox.armed.' || $1)::oid",
    )
    .bind(schema)
    .fetch_one(pool)
    .await
    .unwrap()
}

/// Whether `schema`'s relays sleep consolidated: `sessions` sessions hold
/// all 64 armed locks (after `consolidate_after` of small batches the first
/// `keeping_up_workers` of a relay, 1, take every partition of their relay,
/// and arm them before sleeping).
pub async fn asleep_consolidated(pool: &sqlx::PgPool, schema: &str, sessions: i64) -> bool {
    armed(pool, schema).await == (64, sessions)
}

/// Partitions of `schema` whose relay worker sleeps: the armed locks its
/// session holds, producers NOTIFY for them.
pub async fn armed_partitions(pool: &sqlx::PgPool, schema: &str) -> i64 {
    armed(pool, schema).await.0
}
