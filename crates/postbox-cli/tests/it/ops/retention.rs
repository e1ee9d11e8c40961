//! Retention deletes only what is old enough.

use crate::support::*;
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_deletes_only_what_is_old_enough() {
    let ctx = Ctx::new("retain").await;
    let s = &ctx.schema;
    sqlx::raw_sql(&format!(
        "INSERT INTO {s}.outbox (topic, event, key, payload, sent_at) VALUES
           ('q', 'e', 'old', '{{}}', now() - interval '2 hours'),
           ('q', 'e', 'old', '{{}}', now() - interval '3 hours'),
           ('q', 'e', 'old', '{{}}', now() - interval '4 hours'),
           ('q', 'e', 'recent', '{{}}', now() - interval '5 minutes');
         INSERT INTO {s}.inbox (consumer, message_id, received_at) VALUES
           ('c', 'old-1', now() - interval '2 hours'), ('c', 'old-2', now() - interval '2 hours'),
           ('c', 'new', now());
         INSERT INTO {s}.outbox_dead_letter (id, event_id, topic, event, key, payload, headers, created_at, attempts, last_error, dead_at) VALUES
           (-1, gen_random_uuid(), 'q', 'e', 'k', '{{}}', '{{}}', now(), 3, 'x', now() - interval '2 hours'),
           (-2, gen_random_uuid(), 'q', 'e', 'k', '{{}}', '{{}}', now(), 3, 'x', now());"
    ))
    .execute(&ctx.pool)
    .await
    .unwrap();
    // An old row that was never sent must survive whatever its age.
    sqlx::raw_sql(&format!("ALTER TABLE {s}.outbox DISABLE TRIGGER USER; INSERT INTO {s}.outbox (topic, event, key, payload, created_at) VALUES ('{q}', 'e', 'unsent', '42', now() - interval '1 day')", q = ctx.queue))
        .execute(&ctx.pool)
        .await
        .unwrap();
    let relay = ctx.relay(
        &postbox_testkit::redis_url(),
        &[
            "--outbox-retention",
            "1h",
            "--inbox-retention",
            "1h",
            "--dead-letter-retention",
            "1h",
            "--maintenance-interval",
            "200ms",
            "--stats-interval",
            "100ms",
            "--max-attempts",
            "1000",
            "--retry-min",
            "1h",
            "--retry-max",
            "2h",
        ],
        &[],
    );
    let count = |table: &'static str, cond: &'static str| {
        let (pool, s) = (ctx.pool.clone(), ctx.schema.clone());
        async move {
            sqlx::query_scalar::<_, i64>(&format!("SELECT count(*) FROM {s}.{table} WHERE {cond}"))
                .fetch_one(&pool)
                .await
                .unwrap()
        }
    };
    wait_until(LONG, "old rows deleted", || async {
        count("outbox", "key = 'old'").await == 0
            && count("inbox", "message_id LIKE 'old%'").await == 0
            && count("outbox_dead_letter", "id = -1").await == 0
    })
    .await;
    assert_eq!(count("outbox", "key = 'recent'").await, 1);
    assert_eq!(
        count("outbox", "key = 'unsent'").await,
        1,
        "an unsent row is never deleted"
    );
    assert_eq!(count("inbox", "message_id = 'new'").await, 1);
    assert_eq!(count("outbox_dead_letter", "id = -2").await, 1);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(count("outbox", "key = 'unsent'").await, 1);
    drop(relay);
    ctx.cleanup().await;
}
