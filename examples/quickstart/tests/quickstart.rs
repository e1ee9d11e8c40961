//! The quickstart runs as a user would run it, beside a real `postbox relay`:
//! orders 1 and 3 shipped once, order 2 retried, dead-lettered, and the
//! failures printed by the library although the service installs no logger.

use postbox_testkit::{database_url, redis_url, unique_schema, workspace_bin, RelayProcess};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quickstart_ships_once_and_dead_letters_the_bad_order() {
    let pool = postbox_testkit::pool().await;
    let schema = unique_schema("quickstart");
    let queue = format!("{schema}-orders");
    let mut conn = pool.acquire().await.unwrap();
    postbox::migrate::run(
        &mut conn,
        &postbox::SchemaName::new(&schema).unwrap(),
        Default::default(),
    )
    .await
    .unwrap();
    drop(conn);
    let postbox = workspace_bin("postbox");
    let (db, redis) = (database_url(), redis_url());
    let _relay = RelayProcess::spawn(
        postbox.to_str().unwrap(),
        &[
            "--database-url",
            &db,
            "--schemas",
            &schema,
            "--redis-url",
            &redis,
        ],
        &[],
    );
    let out = tokio::time::timeout(
        std::time::Duration::from_secs(60),
        tokio::process::Command::new(env!("CARGO_BIN_EXE_quickstart"))
            .env("SHOP_SCHEMA", &schema)
            .env("SHOP_QUEUE", &queue)
            .env("DATABASE_URL", &db)
            .env("REDIS_URL", &redis)
            .output(),
    )
    .await
    .expect("the quickstart finishes")
    .unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{stdout}{stderr}");
    assert!(stdout.contains("shipped orders 1 and 3"), "{stdout}");
    // No tracing subscriber in the quickstart: the library says it on stderr.
    assert!(
        stderr.contains("postbox: consumer shipping: handler failed on message"),
        "{stderr}"
    );
    assert!(
        stderr.contains("attempt 2 of 3: order without a qty"),
        "{stderr}"
    );
    assert!(stderr.contains("kept as a dead letter"), "{stderr}");

    let shipped: Vec<(i64, i32)> = sqlx::query_as(&format!(
        "SELECT order_id, qty FROM {schema}.shipments ORDER BY 1"
    ))
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(shipped, vec![(1, 2), (3, 1)]);
    let dead: Vec<(String, i32)> = sqlx::query_as(&format!(
        "SELECT consumer, attempts FROM {schema}.inbox_dead_letter"
    ))
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(dead, vec![("shipping".to_owned(), 3)]);
    postbox_testkit::drop_schema(&pool, &schema).await;
}
