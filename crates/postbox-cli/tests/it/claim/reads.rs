//! What a claim reads: not another partition's backlog, nor the dead
//! entries below its position that a held snapshot keeps.

use super::*;

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
