//! The relay, producers and consumers with least privilege; a database
//! owner that is not a superuser.

use crate::support::*;

fn url_as(role: &str) -> String {
    let mut u = url::Url::parse(&postbox_testkit::database_url()).unwrap();
    u.set_username(role).unwrap();
    u.set_password(Some("postbox-test")).unwrap();
    u.to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relay_producer_and_consumer_run_with_least_privilege() {
    let ctx = Ctx::new("roles").await;
    let sfx = postbox_testkit::suffix();
    let (relay_role, producer, consumer) = (
        format!("r{sfx}_relay"),
        format!("r{sfx}_producer"),
        format!("r{sfx}_consumer"),
    );
    for (role, kind) in [
        (&relay_role, "relay"),
        (&producer, "producer"),
        (&consumer, "consumer"),
    ] {
        sqlx::raw_sql(&format!("CREATE ROLE {role} LOGIN PASSWORD 'postbox-test'"))
            .execute(&ctx.pool)
            .await
            .unwrap();
        let out = std::process::Command::new(BIN)
            .args([
                "grant",
                "--database-url",
                &postbox_testkit::database_url(),
                "--schema",
                &ctx.schema,
                "--role",
                role,
                "--as",
                kind,
            ])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    use sqlx::Connection;
    // A hardened database takes PostgreSQL's default EXECUTE from PUBLIC: the
    // producer's grant covers the function its generated column calls.
    sqlx::raw_sql(&format!(
        "REVOKE EXECUTE ON FUNCTION {}.postbox_outbox_partition(text, uuid) FROM PUBLIC",
        ctx.schema
    ))
    .execute(&ctx.pool)
    .await
    .unwrap();
    // The producer can insert events, with the library's own statements (Rust
    // and Node: their insert returns the new ids) as with plain SQL, and read
    // nothing of them.
    let mut p = sqlx::PgConnection::connect(&url_as(&producer))
        .await
        .unwrap();
    sqlx::query(&format!("INSERT INTO {}.outbox (topic, event, key, payload) VALUES ($1, 'test.event', 'k', '{{\"key\":\"k\",\"seq\":1}}')", ctx.schema))
        .bind(&ctx.queue)
        .execute(&mut p)
        .await
        .unwrap();
    let outbox = postbox::Outbox::new(&ctx.schema).unwrap();
    let mut tx = sqlx::Connection::begin(&mut p).await.unwrap();
    outbox
        .enqueue(&mut tx, ctx.event("k", 2))
        .await
        .expect("enqueue as the producer role");
    outbox
        .enqueue_many(&mut tx, vec![ctx.event("k", 3), ctx.event("k", 4)])
        .await
        .expect("enqueue_many as the producer role");
    tx.commit().await.unwrap();
    let node = crate::node_package::node_cmd(&[
        "test/interop/produce.mjs",
        &ctx.schema,
        &ctx.queue,
        "5",
        "2",
        "1",
    ])
    .env("DATABASE_URL", url_as(&producer))
    .output()
    .await
    .expect("run node");
    assert!(
        node.status.success(),
        "the Node package's enqueueMany as the producer role: {}",
        String::from_utf8_lossy(&node.stderr)
    );
    for read in ["SELECT * FROM {}.outbox", "SELECT payload FROM {}.outbox"] {
        let denied = sqlx::query(&read.replace("{}", &ctx.schema))
            .fetch_all(&mut p)
            .await
            .unwrap_err();
        assert!(denied.to_string().contains("permission denied"), "{denied}");
    }

    // The relay runs as its role: delivers, marks, retains — and cannot change the schema.
    let redis = postbox_testkit::redis_url();
    let relay_url = url_as(&relay_role);
    let relay = RelayProcess::spawn(
        BIN,
        &[
            "--database-url",
            &relay_url,
            "--schemas",
            &ctx.schema,
            "--redis-url",
            &redis,
            "--maintenance-interval",
            "200ms",
            "--outbox-retention",
            "1s",
        ],
        &[],
    );
    wait_until(
        LONG,
        "the events relayed by the least-privilege relay",
        || async { RedisView::new(&redis, &ctx.queue).await.wait_len().await == 6 },
    )
    .await;
    wait_until(LONG, "retention by the least-privilege relay", || async {
        sqlx::query_scalar::<_, i64>(&format!("SELECT count(*) FROM {}.outbox", ctx.schema))
            .fetch_one(&ctx.pool)
            .await
            .unwrap()
            == 0
    })
    .await;
    assert!(
        !relay.output().contains("permission denied"),
        "{}",
        relay.output()
    );
    let mut r = sqlx::PgConnection::connect(&relay_url).await.unwrap();
    let ddl = sqlx::raw_sql(&format!("CREATE TABLE {}.evil (x int)", ctx.schema))
        .execute(&mut r)
        .await
        .unwrap_err();
    assert!(ddl.to_string().contains("permission denied"), "{ddl}");

    // The consumer records messages in the inbox.
    let mut c = sqlx::PgConnection::connect(&url_as(&consumer))
        .await
        .unwrap();
    let inbox = postbox::Inbox::new(&ctx.schema).unwrap();
    assert_eq!(
        inbox.receive(&mut c, "c", "m1").await.unwrap(),
        postbox::Receipt::Fresh
    );
    assert_eq!(
        inbox.receive(&mut c, "c", "m1").await.unwrap(),
        postbox::Receipt::Duplicate
    );
    // ... keeps a message its handler failed on as a dead letter, and takes
    // it back when an operator asks for a replay.
    let consumer_pool = sqlx::PgPool::connect(&url_as(&consumer)).await.unwrap();
    let looped = postbox::InboxConsumer::new(consumer_pool, inbox.clone(), "c")
        .retry(postbox::RetryPolicy::none())
        .replay_poll(std::time::Duration::from_millis(50));
    let failing = postbox::handler_fn(|_, _| Box::pin(async { Err("always".into()) }));
    let stop = tokio_util::sync::CancellationToken::new();
    assert_eq!(
        looped
            .process(&postbox::Message::new("m2", "t"), &failing, &stop)
            .await
            .unwrap(),
        postbox::Processed::DeadLettered
    );
    sqlx::query(&format!(
        "UPDATE {}.inbox_dead_letter SET replay_at = now()",
        ctx.schema
    ))
    .execute(&ctx.pool)
    .await
    .unwrap();
    let fixed = postbox::handler_fn(|_, _| Box::pin(async { Ok(()) }));
    let taken = async {
        wait_until(LONG, "the replay taken by the consumer role", || async {
            sqlx::query_scalar::<_, i64>(&format!(
                "SELECT count(*) FROM {}.inbox_dead_letter",
                ctx.schema
            ))
            .fetch_one(&ctx.pool)
            .await
            .unwrap()
                == 0
        })
        .await;
        stop.cancel();
    };
    tokio::join!(looped.serve_replays(&fixed, &stop), taken);
    assert_eq!(
        inbox.receive(&mut c, "c", "m2").await.unwrap(),
        postbox::Receipt::Duplicate,
        "the replay recorded m2 in the inbox"
    );

    drop(relay);
    drop((p, r, c));
    ctx.cleanup().await;
    for role in [&relay_role, &producer, &consumer] {
        let _ = sqlx::raw_sql(&format!("DROP OWNED BY {role}; DROP ROLE {role}"))
            .execute(&ctx_pool())
            .await;
    }
}

/// A hosted database's admin role is not a superuser (RDS's `rds_superuser`,
/// Cloud SQL's `cloudsqlsuperuser`, Azure's `azure_pg_admin`): a role with
/// only `CREATE` on the database migrates a schema of its own under every
/// trigger wake-up policy, says what it runs as in `status`, grants the
/// relay's and a producer's roles, and the relay delivers as its role. (The
/// logical wake-up's needs, a publication and `REPLICATION`, are in
/// `logical/` and the security page.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_owner_that_is_not_a_superuser_migrates_grants_and_relays() {
    use sqlx::Connection;
    let ctx = Ctx::new("owner").await;
    let sfx = postbox_testkit::suffix();
    let (owner, relay_role, producer) = (
        format!("o{sfx}_owner"),
        format!("o{sfx}_relay"),
        format!("o{sfx}_producer"),
    );
    let db: String = sqlx::query_scalar("SELECT current_database()")
        .fetch_one(&ctx.pool)
        .await
        .unwrap();
    sqlx::raw_sql(&format!(
        "CREATE ROLE {owner} LOGIN PASSWORD 'postbox-test' NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION;
         GRANT CREATE ON DATABASE {db} TO {owner};
         CREATE ROLE {relay_role} LOGIN PASSWORD 'postbox-test';
         CREATE ROLE {producer} LOGIN PASSWORD 'postbox-test';"
    ))
    .execute(&ctx.pool)
    .await
    .unwrap();
    let schema = format!("{}_own", ctx.schema);
    let as_owner = url_as(&owner);
    for notify in ["statement", "off", "adaptive"] {
        let (ok, out, err) = crate::dlq::cli(&[
            "migrate",
            "--database-url",
            &as_owner,
            "--schema",
            &schema,
            "--notify",
            notify,
        ])
        .await;
        assert!(
            ok,
            "migrate --notify {notify} as a non-superuser owner: {out}{err}"
        );
    }
    let schema_owner: String =
        sqlx::query_scalar("SELECT nspowner::regrole::text FROM pg_namespace WHERE nspname = $1")
            .bind(&schema)
            .fetch_one(&ctx.pool)
            .await
            .unwrap();
    assert_eq!(schema_owner, owner);
    let (ok, out, err) =
        crate::dlq::cli(&["status", "--database-url", &as_owner, "--schema", &schema]).await;
    assert!(ok && out.contains("wake-up: adaptive"), "{out}{err}");
    for (role, kind) in [(&relay_role, "relay"), (&producer, "producer")] {
        let (ok, out, err) = crate::dlq::cli(&[
            "grant",
            "--database-url",
            &as_owner,
            "--schema",
            &schema,
            "--role",
            role,
            "--as",
            kind,
        ])
        .await;
        assert!(ok, "grant --as {kind} by a non-superuser owner: {out}{err}");
    }
    let queue = format!("{schema}-q");
    let outbox = postbox::Outbox::new(&schema).unwrap();
    let mut p = sqlx::PgConnection::connect(&url_as(&producer))
        .await
        .unwrap();
    let mut tx = sqlx::Connection::begin(&mut p).await.unwrap();
    outbox
        .enqueue_many(&mut tx, (1..=3).map(|n| event(&queue, "k", n)).collect())
        .await
        .expect("enqueue as the producer role the owner granted");
    tx.commit().await.unwrap();
    let redis = postbox_testkit::redis_url();
    let relay = RelayProcess::spawn(
        BIN,
        &[
            "--database-url",
            &url_as(&relay_role),
            "--schemas",
            &schema,
            "--redis-url",
            &redis,
        ],
        &[],
    );
    wait_until(
        LONG,
        "the events relayed as the granted relay role",
        || async { RedisView::new(&redis, &queue).await.wait_len().await == 3 },
    )
    .await;
    assert!(
        !relay.output().contains("permission denied"),
        "{}",
        relay.output()
    );
    drop(relay);
    drop(p);
    let admin = ctx_pool();
    sqlx::raw_sql(&format!("DROP SCHEMA {schema} CASCADE"))
        .execute(&admin)
        .await
        .unwrap();
    ctx.cleanup().await;
    for role in [&relay_role, &producer, &owner] {
        let _ = sqlx::raw_sql(&format!(
            "DROP OWNED BY {role}; REVOKE ALL ON DATABASE {db} FROM {role}; DROP ROLE {role}"
        ))
        .execute(&admin)
        .await;
    }
}

fn ctx_pool() -> sqlx::PgPool {
    sqlx::postgres::PgPoolOptions::new()
        .connect_lazy(&postbox_testkit::database_url())
        .unwrap()
}
