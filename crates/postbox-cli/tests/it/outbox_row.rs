//! The outbox row as producers write it (migration 0008): every key keeps the
//! partition 0001 gave it, bad rows from plain SQL are refused by name, and
//! the clients make time-ordered event ids.

use postbox::migrate::{migrations, WakeUp};
use postbox::{Event, SchemaName};
use sqlx::postgres::PgDatabaseError;
use sqlx::PgPool;

/// 0001's partition expression, the contract every later migration keeps.
const PARTITION_0001: &str =
    "((hashtextextended(coalesce(key, event_id::text), 0) % 64 + 64) % 64)::smallint";

/// Keys of every shape: empty, ASCII, long, non-ASCII, NULL (partitioned by event id).
fn keys() -> Vec<Option<String>> {
    let mut keys: Vec<Option<String>> = (0..3000).map(|i| Some(format!("chat:{i}"))).collect();
    keys.extend((0..500).map(|_| None));
    keys.extend(["", " ", "ключ", "鍵", "🔑"].map(|k| Some(k.to_string())));
    keys.push(Some("x".repeat(5000)));
    keys
}

async fn insert_keys(pool: &PgPool, schema: &str, keys: &[Option<String>]) {
    sqlx::query(&format!(
        "INSERT INTO {schema}.outbox (topic, event, key, payload)
         SELECT 'q', 'e', k, '{{}}' FROM unnest($1::text[]) k"
    ))
    .bind(keys)
    .execute(pool)
    .await
    .unwrap();
}

async fn migrate(pool: &PgPool, schema: &str) {
    let mut conn = pool.acquire().await.unwrap();
    postbox::migrate::run(&mut conn, &SchemaName::new(schema).unwrap(), WakeUp::Off)
        .await
        .unwrap();
}

#[tokio::test]
async fn migrations_from_0008_keep_every_key_in_its_partition() {
    let pool = postbox_testkit::pool().await;
    let schema = postbox_testkit::unique_schema("row_part");
    let name = SchemaName::new(&schema).unwrap();
    let all = migrations(&name);
    let (before, after): (Vec<_>, Vec<_>) = all.iter().partition(|m| m.version < 8);
    sqlx::query(&format!("CREATE SCHEMA {schema}"))
        .execute(&pool)
        .await
        .unwrap();
    for m in &before {
        sqlx::raw_sql(&m.sql).execute(&pool).await.unwrap();
    }
    let keys = keys();
    insert_keys(&pool, &schema, &keys).await;
    let old: Vec<(i64, i16)> = sqlx::query_as(&format!(
        "SELECT id, partition_id FROM {schema}.outbox ORDER BY id"
    ))
    .fetch_all(&pool)
    .await
    .unwrap();
    let spread: std::collections::HashSet<i16> = old.iter().map(|r| r.1).collect();
    assert_eq!(spread.len(), 64, "the keys cover every partition");

    for m in &after {
        sqlx::raw_sql(&m.sql).execute(&pool).await.unwrap();
    }

    let new: Vec<(i64, i16)> = sqlx::query_as(&format!(
        "SELECT id, partition_id FROM {schema}.outbox ORDER BY id"
    ))
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(old, new, "a row changed partition in the migration");

    // Rows written after it land where 0001's expression puts them.
    insert_keys(&pool, &schema, &keys).await;
    let wrong: i64 = sqlx::query_scalar(&format!(
        "SELECT count(*) FROM {schema}.outbox WHERE partition_id <> {PARTITION_0001}"
    ))
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(wrong, 0);
    let index: String = sqlx::query_scalar(
        "SELECT indexdef FROM pg_indexes WHERE schemaname = $1 AND indexname = 'outbox_unsent_by_position'",
    )
    .bind(&schema)
    .fetch_one(&pool)
    .await
    .unwrap();
    assert!(
        index.ends_with("(partition_id, xid, ((id + 0))) WHERE ((sent_at IS NULL) AND (partition_id IS NOT NULL))"),
        "{index}"
    );
    postbox_testkit::drop_schema(&pool, &schema).await;
}

#[tokio::test]
async fn bad_rows_from_sql_are_refused_by_constraint_name() {
    let pool = postbox_testkit::pool().await;
    let schema = postbox_testkit::unique_schema("row_check");
    migrate(&pool, &schema).await;
    let insert = |topic: &'static str, event: &'static str, headers: &'static str| {
        let pool = pool.clone();
        let sql = format!(
            "INSERT INTO {schema}.outbox (topic, event, payload, headers) VALUES ($1, $2, '{{}}', $3::jsonb)"
        );
        async move {
            sqlx::query(&sql)
                .bind(topic)
                .bind(event)
                .bind(headers)
                .execute(&pool)
                .await
        }
    };
    for (topic, event, headers, constraint) in [
        ("", "e", "{}", "outbox_topic_check"),
        ("q", "", "{}", "outbox_event_check"),
        ("q", "e", "[]", "outbox_headers_check"),
        ("q", "e", "\"x\"", "outbox_headers_check"),
    ] {
        let err = insert(topic, event, headers).await.unwrap_err();
        let db = err
            .as_database_error()
            .unwrap()
            .downcast_ref::<PgDatabaseError>();
        assert_eq!(db.code(), "23514", "{db}");
        assert_eq!(db.constraint(), Some(constraint), "{db}");
    }
    insert("q", "e", "{\"a\": \"b\"}").await.unwrap();
    // The columns read back as their base types.
    let (topic, event, headers): (String, String, serde_json::Value) = sqlx::query_as(&format!(
        "SELECT topic, event, headers FROM {schema}.outbox"
    ))
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!((topic.as_str(), event.as_str()), ("q", "e"));
    assert_eq!(headers, serde_json::json!({"a": "b"}));
    postbox_testkit::drop_schema(&pool, &schema).await;
}

#[tokio::test]
async fn the_library_makes_time_ordered_event_ids() {
    let pool = postbox_testkit::pool().await;
    let schema = postbox_testkit::unique_schema("row_v7");
    migrate(&pool, &schema).await;
    let outbox = postbox::Outbox::new(&schema).unwrap();
    let mut tx = pool.begin().await.unwrap();
    let one = outbox
        .enqueue(&mut tx, Event::new("q", "e", serde_json::json!({})))
        .await
        .unwrap();
    let many = outbox
        .enqueue_many(
            &mut tx,
            (0..3)
                .map(|_| Event::new("q", "e", serde_json::json!({})))
                .collect(),
        )
        .await
        .unwrap();
    let own = uuid::Uuid::new_v4();
    let given = outbox
        .enqueue(
            &mut tx,
            Event::new("q", "e", serde_json::json!({})).event_id(own),
        )
        .await
        .unwrap();
    tx.commit().await.unwrap();
    for e in std::iter::once(&one).chain(&many) {
        assert_eq!(e.event_id.get_version_num(), 7, "{}", e.event_id);
    }
    assert_eq!(given.event_id, own, "an id the caller set is kept");
    let stored: Vec<uuid::Uuid> =
        sqlx::query_scalar(&format!("SELECT event_id FROM {schema}.outbox ORDER BY id"))
            .fetch_all(&pool)
            .await
            .unwrap();
    let mut made: Vec<uuid::Uuid> = std::iter::once(&one)
        .chain(&many)
        .map(|e| e.event_id)
        .collect();
    made.push(own);
    assert_eq!(stored, made);
    postbox_testkit::drop_schema(&pool, &schema).await;
}
