//! What a claim takes: the lowest ids of the owned partitions, a key held
//! behind its waiting row, and below its position only the holes' rows.

use super::*;

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

/// A row whose retry is due, but that the worker's position has passed (its
/// held-row check not yet back to it), still holds its key's later rows: a
/// claim from the position takes none of them, so the later row cannot
/// overtake it; from the head, the due row goes alone and the later one
/// after it is sent. (Before, a row counted as waiting only while its
/// next_attempt_at was ahead, and a claim in that moment sent the later row
/// first.)
#[tokio::test]
async fn a_due_retry_below_the_position_holds_its_keys_later_rows() {
    let ctx = Ctx::new("claim_due").await;
    let s = &ctx.schema;
    let q = Queries::new(&SchemaName::new(s).unwrap());
    let insert = |next: &'static str| {
        format!(
            "INSERT INTO {s}.outbox (topic, event, key, payload, next_attempt_at) \
             VALUES ('q', 'e', 'k', '{{}}', {next}) RETURNING id, xid::text::bigint"
        )
    };
    let (due, due_xid): (i64, i64) = sqlx::query_as(&insert("now() - interval '1 second'"))
        .fetch_one(&ctx.pool)
        .await
        .unwrap();
    let (later, _): (i64, i64) = sqlx::query_as(&insert("NULL"))
        .fetch_one(&ctx.pool)
        .await
        .unwrap();
    let p = partition_of(&ctx, "k").await;
    let mut conn = worker_session(&q).await;
    for claim in [Claim::Merge, Claim::Sorted] {
        let got = claim
            .ids_from(&mut conn, &q, &[p], 10, (due_xid, due), &[])
            .await;
        assert!(got.is_empty(), "{claim:?}: {got:?} overtook row {due}");
        let got = claim.ids_from(&mut conn, &q, &[p], 10, (0, 0), &[]).await;
        assert_eq!(got, vec![due], "{claim:?}: the due row alone, then {later}");
    }
    drop(conn);
    ctx.cleanup().await;
}
