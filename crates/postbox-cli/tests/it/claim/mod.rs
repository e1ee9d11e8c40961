//! The relay's claims, run as a relay worker's session runs them: the merge of
//! one scan per partition (`outbox_claim_batch.sql`) and the sorted claim of a
//! worker that keeps up (`Queries::outbox_claim_sorted`). What they take, and that
//! what they read follows the owned partitions, not the backlog of others.

use crate::support::*;
use postbox::sql::{Queries, Take};
use postbox::SchemaName;
use sqlx::{Connection, PgConnection};

mod plans;
mod reads;
mod takes;

/// A session set up like a relay worker's (generic plans included).
async fn worker_session(q: &Queries) -> PgConnection {
    let mut conn = PgConnection::connect(&postbox_testkit::database_url())
        .await
        .unwrap();
    sqlx::query(&q.relay_session_limits)
        .bind(60_000)
        .execute(&mut conn)
        .await
        .unwrap();
    conn
}

/// `rows` unsent rows of `key` (one partition), inserted in one statement.
async fn backlog(ctx: &Ctx, key: &str, rows: i64) -> i16 {
    sqlx::query(&format!(
        "INSERT INTO {}.outbox (topic, event, key, payload)
         SELECT 'q', 'e', $1, jsonb_build_object('n', g, 'pad', repeat('x', 100))
           FROM generate_series(1, $2) g",
        ctx.schema
    ))
    .bind(key)
    .bind(rows)
    .execute(&ctx.pool)
    .await
    .unwrap();
    partition_of(ctx, key).await
}

/// No autovacuum on the outbox: its statistics change only when a test says so.
async fn statistics_stay_as_they_are(ctx: &Ctx) {
    sqlx::query(&format!(
        "ALTER TABLE {}.outbox SET (autovacuum_enabled = false)",
        ctx.schema
    ))
    .execute(&ctx.pool)
    .await
    .unwrap();
}

async fn partition_of(ctx: &Ctx, key: &str) -> i16 {
    sqlx::query_scalar(&format!(
        "SELECT partition_id FROM {}.outbox WHERE key = $1 LIMIT 1",
        ctx.schema
    ))
    .bind(key)
    .fetch_one(&ctx.pool)
    .await
    .unwrap()
}

/// The two claims a worker chooses between.
#[derive(Debug, Clone, Copy)]
enum Claim {
    Merge,
    Sorted,
}

impl Claim {
    /// The statement for `owned`, its parameter types and its arguments for
    /// `batch`, from `after` (every partition at one position) with `holes`,
    /// as PREPARE and EXECUTE take them.
    fn prepared_from(
        self,
        q: &Queries,
        owned: &[i16],
        batch: i32,
        after: (i64, i64),
        holes: &[i64],
    ) -> (String, &'static str, String) {
        let holes = format!(
            "'{{{}}}'",
            holes
                .iter()
                .map(i64::to_string)
                .collect::<Vec<_>>()
                .join(",")
        );
        match self {
            Claim::Merge => (
                q.outbox_claim(owned, Take::Mark),
                "int, text[], bigint[], text[]",
                format!(
                    "{batch}, array_fill('{}'::text, ARRAY[64]), array_fill({}::bigint, ARRAY[64]), {holes}",
                    after.0, after.1
                ),
            ),
            Claim::Sorted => (
                q.outbox_claim_sorted(Take::Mark),
                "int, smallint[], text, bigint, text[]",
                format!(
                    "{batch}, '{{{}}}', '{}', {}, {holes}",
                    owned
                        .iter()
                        .map(i16::to_string)
                        .collect::<Vec<_>>()
                        .join(","),
                    after.0,
                    after.1
                ),
            ),
        }
    }

    /// [`prepared_from`](Self::prepared_from) the head of every partition.
    fn prepared(self, q: &Queries, owned: &[i16], batch: i32) -> (String, &'static str, String) {
        self.prepared_from(q, owned, batch, (0, 0), &[])
    }

    /// The ids it claims from the head of every partition, in a transaction
    /// rolled back at once.
    async fn ids(
        self,
        conn: &mut PgConnection,
        q: &Queries,
        owned: &[i16],
        batch: i32,
    ) -> Vec<i64> {
        self.ids_from(conn, q, owned, batch, (0, 0), &[]).await
    }

    /// The ids it claims from `after` with `holes`, rolled back at once.
    async fn ids_from(
        self,
        conn: &mut PgConnection,
        q: &Queries,
        owned: &[i16],
        batch: i32,
        after: (i64, i64),
        holes: &[i64],
    ) -> Vec<i64> {
        // As a worker claims: the statements without hole branches when
        // there are no holes.
        let (merge, sorted) = if holes.is_empty() {
            (
                q.outbox_claim_past(owned, Take::Mark),
                q.outbox_claim_sorted_past(Take::Mark),
            )
        } else {
            (
                q.outbox_claim(owned, Take::Mark),
                q.outbox_claim_sorted(Take::Mark),
            )
        };
        let holes: Vec<String> = holes.iter().map(i64::to_string).collect();
        let mut tx = conn.begin().await.unwrap();
        let mut query = match self {
            Claim::Merge => sqlx::query_as::<_, (i64,)>(&merge)
                .bind(batch)
                .bind(vec![after.0.to_string(); 64])
                .bind(vec![after.1; 64]),
            Claim::Sorted => sqlx::query_as::<_, (i64,)>(&sorted)
                .bind(batch)
                .bind(owned)
                .bind(after.0.to_string())
                .bind(after.1),
        };
        if !holes.is_empty() {
            query = query.bind(&holes);
        }
        let got = query.fetch_all(&mut *tx).await.unwrap();
        tx.rollback().await.unwrap();
        // RETURNING has no order; the worker sorts.
        let mut ids: Vec<i64> = got.into_iter().map(|(id,)| id).collect();
        ids.sort_unstable();
        ids
    }
}

/// Buffers `claim` reads for `owned`, from EXPLAIN (ANALYZE, BUFFERS) of
/// the prepared statement (its scans: not what the mark writes, a new version
/// and index entries per row), and the rows it returns; the mark is rolled
/// back.
async fn claim_cost(
    conn: &mut PgConnection,
    q: &Queries,
    claim: Claim,
    owned: &[i16],
    batch: i32,
) -> (i64, i64) {
    claim_cost_from(conn, claim.prepared(q, owned, batch)).await
}

/// [`claim_cost`] of a claim as [`Claim::prepared_from`] makes it.
async fn claim_cost_from(
    conn: &mut PgConnection,
    (sql, types, args): (String, &'static str, String),
) -> (i64, i64) {
    sqlx::raw_sql(&format!("BEGIN; PREPARE claim({types}) AS {sql}"))
        .execute(&mut *conn)
        .await
        .unwrap();
    let plan: serde_json::Value = sqlx::query_scalar(&format!(
        "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) EXECUTE claim({args})"
    ))
    .fetch_one(&mut *conn)
    .await
    .unwrap();
    sqlx::raw_sql("DEALLOCATE claim; ROLLBACK")
        .execute(&mut *conn)
        .await
        .unwrap();
    // The take is the statement; its scans are its children (the InitPlans
    // of the snapshot and of the claimed ids, and the lookup by id).
    let top = &plan[0]["Plan"];
    assert_eq!(top["Node Type"], "ModifyTable", "{plan}");
    let blocks = |node: &serde_json::Value| -> i64 {
        ["Shared Hit Blocks", "Shared Read Blocks"]
            .iter()
            .map(|k| node[k].as_i64().unwrap())
            .sum()
    };
    let scans = top["Plans"].as_array().unwrap().iter().map(blocks).sum();
    (scans, top["Actual Rows"].as_i64().unwrap())
}

/// The partitions a worker of four might own: sixteen, with or without `p`.
fn share(with: Option<i16>, without: i16) -> Vec<i16> {
    let mut owned: Vec<i16> = (0..64).filter(|&q| q != without).take(16).collect();
    if let Some(p) = with {
        owned[0] = p;
    }
    owned
}
