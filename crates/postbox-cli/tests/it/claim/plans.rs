//! The claims' plans: indexes kept when made on a young outbox, no JIT,
//! ordered scans merged.

use super::*;

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
