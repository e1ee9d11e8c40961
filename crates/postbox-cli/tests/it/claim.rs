//! The relay's claims, run as a relay worker's session runs them: the merge of
//! one scan per partition (`outbox_claim_batch.sql`) and the sorted claim of a
//! worker that keeps up (`Queries::outbox_claim_sorted`). What they take, and that
//! what they read follows the owned partitions, not the backlog of others.

use crate::support::*;
use postbox::sql::{Queries, Take};
use postbox::SchemaName;
use sqlx::{Connection, PgConnection};

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

#[tokio::test]
async fn an_idle_worker_does_not_read_another_partitions_backlog() {
    let ctx = Ctx::new("claim_idle").await;
    let q = Queries::new(&SchemaName::new(&ctx.schema).unwrap());
    const BACKLOG: i64 = 40_000;
    let hot = backlog(&ctx, "hot", BACKLOG).await;
    let mut conn = worker_session(&q).await;

    // Before and after the table's statistics know of the backlog, and with
    // statistics from before most of it was sent (normal for a queue): the
    // primary key also yields id order, and must not be walked over the sent
    // rows instead.
    statistics_stay_as_they_are(&ctx).await;
    for state in ["never analyzed", "analyzed", "analyzed, then 30,000 sent"] {
        let sql = match state {
            "analyzed" => format!("ANALYZE {}.outbox", ctx.schema),
            "analyzed, then 30,000 sent" => format!(
                "UPDATE {}.outbox SET sent_at = now() WHERE id <= (SELECT min(id) + 29999 FROM {}.outbox)",
                ctx.schema, ctx.schema
            ),
            _ => "SELECT 1".into(),
        };
        sqlx::query(&sql).execute(&ctx.pool).await.unwrap();
        for claim in [Claim::Merge, Claim::Sorted] {
            let (idle_blocks, idle_rows) =
                claim_cost(&mut conn, &q, claim, &share(None, hot), 1000).await;
            assert_eq!(idle_rows, 0);
            assert!(
                idle_blocks < 200,
                "an idle worker's {claim:?} claim read {idle_blocks} blocks ({state}); \
                 the backlog it does not own is {BACKLOG} rows"
            );
        }
        // The sorted claim reads the owned backlog whole, by design: a worker
        // uses it only after a claim that found less than a batch.
        let (busy_blocks, busy_rows) =
            claim_cost(&mut conn, &q, Claim::Merge, &share(Some(hot), hot), 1000).await;
        assert_eq!(busy_rows, 1000);
        assert!(
            busy_blocks < 10_000,
            "the owner's claim of 1000 rows read {busy_blocks} blocks ({state})"
        );
    }
    drop(conn);
    ctx.cleanup().await;
}

/// Both claims take the lowest ids of the owned partitions, skip sent rows,
/// and hold back a key behind its row waiting out a backoff, exactly as a
/// single scan in id order would (the query before the claim was split per
/// partition, kept here as the reference).
#[tokio::test]
async fn the_claim_takes_the_lowest_ids_of_the_owned_partitions() {
    let ctx = Ctx::new("claim_order").await;
    let s = &ctx.schema;
    let q = Queries::new(&SchemaName::new(s).unwrap());
    sqlx::query(&format!(
        "INSERT INTO {s}.outbox (topic, event, key, payload)
         SELECT 'q', 'e', CASE WHEN g % 7 = 0 THEN NULL ELSE 'k' || (g % 50) END, '{{}}'
           FROM generate_series(1, 3000) g"
    ))
    .execute(&ctx.pool)
    .await
    .unwrap();
    let waiting = partition_of(&ctx, "k3").await;
    sqlx::raw_sql(&format!(
        "UPDATE {s}.outbox SET sent_at = now() WHERE id % 5 = 0;
         UPDATE {s}.outbox SET next_attempt_at = now() + interval '1 hour', attempts = 1
          WHERE id = (SELECT min(id) + 40 FROM {s}.outbox WHERE key = 'k3' AND sent_at IS NULL)"
    ))
    .execute(&ctx.pool)
    .await
    .unwrap();
    let reference = format!(
        "SELECT o.id FROM {s}.outbox o
          WHERE o.sent_at IS NULL AND o.partition_id = ANY($1::smallint[])
            AND (o.next_attempt_at IS NULL OR o.next_attempt_at <= now())
            AND NOT EXISTS (SELECT 1 FROM {s}.outbox w
                             WHERE w.sent_at IS NULL AND w.next_attempt_at IS NOT NULL
                               AND w.next_attempt_at > now() AND w.key = o.key
                               AND (w.xid, w.id) < (o.xid, o.id))
          ORDER BY o.xid, o.id LIMIT $2"
    );
    let mut conn = worker_session(&q).await;
    let shares: Vec<Vec<i16>> = vec![
        (0..64).collect(),
        (0..64).filter(|p| p % 4 == waiting % 4).collect(),
        vec![waiting],
        (0..64).filter(|&p| p != waiting).step_by(3).collect(),
    ];
    for owned in shares {
        for batch in [1, 37, 500, 5000] {
            let expected: Vec<i64> = sqlx::query_scalar(&reference)
                .bind(&owned)
                .bind(batch)
                .fetch_all(&ctx.pool)
                .await
                .unwrap();
            // Run it more than five times: a prepared statement's plan may
            // change after its fifth execution.
            for claim in [Claim::Merge, Claim::Sorted] {
                for _ in 0..6 {
                    let got = claim.ids(&mut conn, &q, &owned, batch).await;
                    assert_eq!(
                        got, expected,
                        "{claim:?} claim, partitions {owned:?}, batch {batch}"
                    );
                }
            }
            assert!(!expected.is_empty());
        }
    }
    drop(conn);
    ctx.cleanup().await;
}

/// A worker's statements keep finding rows through the indexes when their
/// plans were made while the outbox held a handful of rows (a fresh
/// deployment; statistics never gathered): a plan cached then would otherwise
/// scan the whole table, sent rows included, at every batch for the rest of
/// the session.
#[tokio::test]
async fn plans_made_on_a_nearly_empty_outbox_keep_using_the_indexes() {
    let ctx = Ctx::new("claim_young_plans").await;
    let q = Queries::new(&SchemaName::new(&ctx.schema).unwrap());
    statistics_stay_as_they_are(&ctx).await;
    let p = backlog(&ctx, "young", 20).await;
    let mut conn = worker_session(&q).await;
    let claim = q.outbox_claim(&[p], Take::Mark);
    let sorted = q.outbox_claim_sorted(Take::Mark);
    let claim_delete = q.outbox_claim(&[p], Take::Delete);
    let sorted_delete = q.outbox_claim_sorted(Take::Delete);
    let sorted_args = format!("1000, ARRAY[{p}]::smallint[], '0', 0, '{{}}'::text[]");
    let merge_args =
        "1000, array_fill('0'::text, ARRAY[64]), array_fill(0::bigint, ARRAY[64]), '{}'::text[]";
    let statements = [
        ("mark", q.outbox_mark_sent.as_str(), "ARRAY[0]::bigint[]"),
        (
            "delete",
            q.outbox_delete_sent.as_str(),
            "ARRAY[0]::bigint[]",
        ),
        ("defer", q.outbox_defer.as_str(), "0, 'e', 1000"),
        ("claim", claim.as_str(), merge_args),
        ("claim_sorted", sorted.as_str(), sorted_args.as_str()),
        ("claim_delete", claim_delete.as_str(), merge_args),
        (
            "claim_sorted_delete",
            sorted_delete.as_str(),
            sorted_args.as_str(),
        ),
    ];
    for (name, sql, args) in statements {
        // Made and cached (generic plans) while the table is young; rolled
        // back, so the rows stay as they are.
        sqlx::raw_sql(&format!(
            "BEGIN; PREPARE {name} AS {sql}; EXECUTE {name}({args}); ROLLBACK"
        ))
        .execute(&mut conn)
        .await
        .unwrap();
    }
    backlog(&ctx, "old", 5000).await;
    sqlx::query(&format!("UPDATE {}.outbox SET sent_at = now()", ctx.schema))
        .execute(&ctx.pool)
        .await
        .unwrap();
    for (name, _, args) in statements {
        let plan: Vec<String> = sqlx::query_scalar(&format!("EXPLAIN EXECUTE {name}({args})"))
            .fetch_all(&mut conn)
            .await
            .unwrap();
        let plan = plan.join("\n");
        assert!(
            !plan.contains("Seq Scan"),
            "{name}, planned on a young outbox, scans the whole table:\n{plan}"
        );
        // The take by id and the look for a key's waiting rows read the
        // primary key and outbox_waiting: the claim's own index, read whole,
        // would walk every dead entry a held snapshot keeps.
        for other in ["outbox o", "outbox w"] {
            assert!(
                !plan.contains(&format!("outbox_unsent_by_position on {other} ")),
                "{name}, planned on a young outbox, reads the claim's index for {other}:\n{plan}"
            );
        }
        // A bitmap scan would read the entries of rows sent since the last
        // vacuum at every execution; an index scan marks them dead once.
        assert!(
            !plan.contains("Bitmap"),
            "{name}, planned on a young outbox, uses a bitmap scan:\n{plan}"
        );
    }
    drop(conn);
    ctx.cleanup().await;
}

/// While a snapshot older than them is held, the rows a relay sent stay in
/// the claim's index as dead entries that no scan may skip for good. A claim
/// from the worker's position does not read them; one from the partitions'
/// head reads them all (what every claim did before migration 0010).
#[tokio::test]
async fn a_claim_from_its_position_skips_what_a_held_snapshot_keeps() {
    let ctx = Ctx::new("claim_horizon").await;
    let s = &ctx.schema;
    let q = Queries::new(&SchemaName::new(s).unwrap());
    let mut snapshot = PgConnection::connect(&postbox_testkit::database_url())
        .await
        .unwrap();
    sqlx::raw_sql(&format!(
        "BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT count(*) FROM {s}.outbox"
    ))
    .execute(&mut snapshot)
    .await
    .unwrap();
    const SENT: i64 = 20_000;
    let p = backlog(&ctx, "horizon", SENT).await;
    sqlx::query(&format!("UPDATE {s}.outbox SET sent_at = now()"))
        .execute(&ctx.pool)
        .await
        .unwrap();
    // The position a worker holds after sending them.
    let (xid, id): (i64, i64) = sqlx::query_as(&format!(
        "SELECT max(xid::text::bigint), max(id) FROM {s}.outbox"
    ))
    .fetch_one(&ctx.pool)
    .await
    .unwrap();
    backlog(&ctx, "horizon", 10).await;
    // Vacuum may not remove the sent rows' versions: the snapshot sees them.
    sqlx::raw_sql(&format!("VACUUM {s}.outbox"))
        .execute(&ctx.pool)
        .await
        .unwrap();
    let mut conn = worker_session(&q).await;
    for claim in [Claim::Merge, Claim::Sorted] {
        for _ in 0..6 {
            let (blocks, rows) = claim_cost_from(
                &mut conn,
                claim.prepared_from(&q, &[p], 100, (xid, id), &[]),
            )
            .await;
            assert_eq!(rows, 10, "{claim:?}");
            assert!(
                blocks < 100,
                "a {claim:?} claim from its position read {blocks} blocks"
            );
        }
        let (blocks, rows) = claim_cost(&mut conn, &q, claim, &[p], 100).await;
        assert_eq!(rows, 10, "{claim:?}");
        assert!(
            blocks > 1000,
            "from the head, the {claim:?} claim walks the {SENT} dead entries: {blocks} blocks"
        );
    }
    sqlx::raw_sql("ROLLBACK")
        .execute(&mut snapshot)
        .await
        .unwrap();
    drop((conn, snapshot));
    ctx.cleanup().await;
}

/// Below its position a claim takes only the rows of the transactions given
/// as holes (open when the position passed them): a late commit is found
/// there, and nothing sent before is read again.
#[tokio::test]
async fn below_its_position_a_claim_takes_only_the_holes_rows() {
    let ctx = Ctx::new("claim_holes").await;
    let s = &ctx.schema;
    let q = Queries::new(&SchemaName::new(s).unwrap());
    // Three transactions, one row each, on one key: a (committed first),
    // late (its xid below b's), b.
    let mut late = ctx.pool.begin().await.unwrap();
    let late_xid: i64 = sqlx::query_scalar("SELECT pg_current_xact_id()::text::bigint")
        .fetch_one(&mut *late)
        .await
        .unwrap();
    let insert = format!(
        "INSERT INTO {s}.outbox (topic, event, key, payload) VALUES ('q', 'e', 'k', '{{}}')
         RETURNING id"
    );
    sqlx::query(&insert).execute(&ctx.pool).await.unwrap();
    let b: i64 = sqlx::query_scalar(&insert)
        .fetch_one(&ctx.pool)
        .await
        .unwrap();
    let (b_xid,): (i64,) = sqlx::query_as(&format!(
        "SELECT xid::text::bigint FROM {s}.outbox WHERE id = $1"
    ))
    .bind(b)
    .fetch_one(&ctx.pool)
    .await
    .unwrap();
    let l: i64 = sqlx::query_scalar(&insert)
        .fetch_one(&mut *late)
        .await
        .unwrap();
    late.commit().await.unwrap();
    let p = partition_of(&ctx, "k").await;
    let mut conn = worker_session(&q).await;
    for claim in [Claim::Merge, Claim::Sorted] {
        // From the head: all three, b's and a's in (xid, id) order.
        let all = claim.ids_from(&mut conn, &q, &[p], 10, (0, 0), &[]).await;
        assert_eq!(all.len(), 3);
        // Past b, with the late transaction a hole: only its row.
        let got = claim
            .ids_from(&mut conn, &q, &[p], 10, (b_xid, b), &[late_xid])
            .await;
        assert_eq!(got, vec![l], "{claim:?}");
        // Past b without holes: nothing (as if a and b were sent).
        let got = claim
            .ids_from(&mut conn, &q, &[p], 10, (b_xid, b), &[])
            .await;
        assert!(got.is_empty(), "{claim:?}: {got:?}");
    }
    drop(conn);
    ctx.cleanup().await;
}

/// A worker that owns every partition claims a backlog by merging 128
/// branches, a plan costed far above `jit_above_cost`; PostgreSQL would compile
/// it at every execution (6 to 75 s a claim here, against about 30 ms), so a
/// worker's session turns JIT off. The plan must show no JIT.
#[tokio::test]
async fn the_merge_claim_of_every_partition_is_not_compiled_by_jit() {
    let ctx = Ctx::new("nojit").await;
    let q = Queries::new(&SchemaName::new(&ctx.schema).unwrap());
    sqlx::query(&format!(
        "INSERT INTO {}.outbox (topic, event, key, payload)
         SELECT 'q', 'e', 'k' || (g % 256), '{{}}' FROM generate_series(1, 5000) g",
        ctx.schema
    ))
    .execute(&ctx.pool)
    .await
    .unwrap();
    sqlx::raw_sql(&format!("VACUUM ANALYZE {}.outbox", ctx.schema))
        .execute(&ctx.pool)
        .await
        .unwrap();
    let mut conn = worker_session(&q).await;
    let every: Vec<i16> = (0..postbox::PARTITIONS).collect();
    let (sql, types, args) = Claim::Merge.prepared(&q, &every, 1000);
    sqlx::raw_sql(&format!("BEGIN; PREPARE claim({types}) AS {sql}"))
        .execute(&mut conn)
        .await
        .unwrap();
    let plan: serde_json::Value = sqlx::query_scalar(&format!(
        "EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE claim({args})"
    ))
    .fetch_one(&mut conn)
    .await
    .unwrap();
    sqlx::raw_sql("DEALLOCATE claim; ROLLBACK")
        .execute(&mut conn)
        .await
        .unwrap();
    assert!(
        plan[0].get("JIT").is_none(),
        "compiled by JIT: {}",
        plan[0]["JIT"]
    );
    // The take is the statement: its rows are what it returned.
    assert_eq!(plan[0]["Plan"]["Actual Rows"], 1000);
    ctx.cleanup().await;
}

/// The claim of a worker without holes merges its partitions' ordered scans.
/// With a sorting hole branch per partition, PostgreSQL's generic plan for a
/// worker owning 11 partitions or fewer read `$1` rows of every one of them
/// and sorted them all: claims four times slower in `bench drain`.
#[tokio::test]
async fn a_claim_without_holes_merges_the_ordered_scans() {
    let ctx = Ctx::new("merges").await;
    let q = Queries::new(&SchemaName::new(&ctx.schema).unwrap());
    sqlx::query(&format!(
        "INSERT INTO {}.outbox (topic, event, key, payload)
         SELECT 'q', 'e', 'k' || (g % 64), '{{}}' FROM generate_series(1, 20000) g",
        ctx.schema
    ))
    .execute(&ctx.pool)
    .await
    .unwrap();
    sqlx::raw_sql(&format!("VACUUM ANALYZE {}.outbox", ctx.schema))
        .execute(&ctx.pool)
        .await
        .unwrap();
    let mut conn = worker_session(&q).await;
    for owned in [4, 8, 11, 16] {
        let owned: Vec<i16> = (0..owned).collect();
        let sql = q.outbox_claim_past(&owned, Take::Mark);
        sqlx::raw_sql(&format!(
            "BEGIN; PREPARE claim(int, text[], bigint[]) AS {sql}"
        ))
        .execute(&mut conn)
        .await
        .unwrap();
        let plan: serde_json::Value = sqlx::query_scalar(
            "EXPLAIN (FORMAT JSON) EXECUTE claim(500, array_fill('0'::text, ARRAY[64]), array_fill(0::bigint, ARRAY[64]))",
        )
        .fetch_one(&mut conn)
        .await
        .unwrap();
        sqlx::raw_sql("DEALLOCATE claim; ROLLBACK")
            .execute(&mut conn)
            .await
            .unwrap();
        let text = plan.to_string();
        assert!(
            text.contains("\"Merge Append\""),
            "{} partitions: not merged: {plan:#}",
            owned.len()
        );
    }
    ctx.cleanup().await;
}
