//! What the logical wake-up needs: `wal_level = logical` (refused below it,
//! changing nothing), the `REPLICATION` attribute (named when missing, and
//! the relay polls), no superuser.

use super::*;

/// Below wal_level = logical (the shared server), `--notify logical` is
/// refused with the setting and the fix, and the schema keeps its trigger.
#[tokio::test]
async fn logical_migrate_is_refused_below_wal_level_logical_and_changes_nothing() {
    let pool = postbox_testkit::pool().await;
    let wal_level: String = sqlx::query_scalar("SELECT current_setting('wal_level')")
        .fetch_one(&pool)
        .await
        .unwrap();
    if wal_level == "logical" {
        eprintln!("skipped: the shared server has wal_level = logical, nothing to refuse");
        return;
    }
    let schema = postbox_testkit::unique_schema("logref");
    let url = postbox_testkit::database_url();
    assert_ok(&migrate(&url, &schema, "adaptive"));
    assert_eq!(triggers(&pool, &schema).await, ["outbox_notify_adaptive"]);

    let out = migrate(&url, &schema, "logical");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    for needle in [
        "wal_level = logical",
        &format!("wal_level = {wal_level}"),
        "ALTER SYSTEM SET wal_level = logical",
        "restart",
    ] {
        assert!(stderr.contains(needle), "{needle:?} missing from: {stderr}");
    }
    assert_eq!(triggers(&pool, &schema).await, ["outbox_notify_adaptive"]);
    assert_eq!(publication(&pool, &schema).await, None);

    // The library says the same, typed.
    let mut conn = pool.acquire().await.unwrap();
    let e = postbox::migrate::run(
        &mut conn,
        &SchemaName::new(&schema).unwrap(),
        WakeUp::Logical,
    )
    .await
    .unwrap_err();
    assert!(
        matches!(&e, postbox::MigrateError::WalLevelNotLogical { found, .. } if *found == wal_level),
        "{e}"
    );
    drop(conn);
    postbox_testkit::drop_schema(&pool, &schema).await;
}

/// A relay role without the REPLICATION attribute: the relay says what to
/// grant and keeps delivering by polling.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logical_wakeup_without_replication_attribute_says_what_to_grant_and_polls() {
    let pg = PgCluster::start_logical().await;
    let redis = RedisServer::start().await;
    let url = pg.url();
    let pool = private_pool(&url).await;
    let schema = postbox_testkit::unique_schema("lognorepl");
    let queue = format!("{schema}-q");
    assert_ok(&migrate(&url, &schema, "logical"));
    let role = format!("{schema}_relay");
    sqlx::raw_sql(&format!("CREATE ROLE {role} LOGIN NOREPLICATION"))
        .execute(&pool)
        .await
        .unwrap();
    let grant = Command::new(BIN)
        .args([
            "grant",
            "--database-url",
            &url,
            "--schema",
            &schema,
            "--role",
            &role,
            "--as",
            "relay",
        ])
        .output()
        .unwrap();
    assert_ok(&grant);
    let said = String::from_utf8_lossy(&grant.stdout);
    assert!(
        said.contains(&format!("ALTER ROLE {role} REPLICATION")),
        "{said}"
    );
    let relay_url = url.replace("postgres://postgres@", &format!("postgres://{role}@"));
    let relay = relay_polling(&relay_url, &schema, &redis.url(), "200ms");
    relay
        .wait_for_line("lacks the REPLICATION attribute", LONG)
        .await;
    assert!(
        relay
            .output()
            .contains(&format!("ALTER ROLE {role} REPLICATION")),
        "{}",
        relay.output()
    );
    let outbox = Outbox::new(&schema).unwrap();
    produce(&pool, &outbox, vec![event(&queue, "k", 1)]).await;
    wait_until(QUICK, "delivery by polling", || async {
        unsent(&pool, &schema).await == 0
    })
    .await;
    assert!(slots(&pool).await.is_empty());
}

/// A hosted database's admin is not a superuser: a role with `CREATE` on the
/// database (and neither SUPERUSER nor REPLICATION) migrates with
/// `--notify logical` (its publication is of the outbox it owns) and grants
/// the relay's role; with `REPLICATION` given to that role (by whoever may),
/// the relay delivers through the logical wake-up.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logical_wakeup_needs_no_superuser_to_migrate_and_grant() {
    let pg = PgCluster::start_logical().await;
    let redis = RedisServer::start().await;
    let url = pg.url();
    let pool = private_pool(&url).await;
    let schema = postbox_testkit::unique_schema("logowner");
    let queue = format!("{schema}-q");
    let (owner, role) = (format!("{schema}_owner"), format!("{schema}_relay"));
    let db: String = sqlx::query_scalar("SELECT current_database()")
        .fetch_one(&pool)
        .await
        .unwrap();
    sqlx::raw_sql(&format!(
        "CREATE ROLE {owner} LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION;
         GRANT CREATE ON DATABASE {db} TO {owner};
         CREATE ROLE {role} LOGIN REPLICATION;"
    ))
    .execute(&pool)
    .await
    .unwrap();
    let as_role = |r: &str| url.replace("postgres://postgres@", &format!("postgres://{r}@"));
    let out = migrate(&as_role(&owner), &schema, "logical");
    assert_ok(&out);
    let (_, ins, _, _) = publication(&pool, &schema).await.expect("publication");
    assert!(ins);
    assert_ok(
        &Command::new(BIN)
            .args([
                "grant",
                "--database-url",
                &as_role(&owner),
                "--schema",
                &schema,
                "--role",
                &role,
                "--as",
                "relay",
            ])
            .output()
            .unwrap(),
    );
    let relay = relay(&as_role(&role), &schema, &redis.url());
    relay.wait_for_line("logical wake-up streaming", LONG).await;
    wait_idle(&pool, &schema).await;
    let outbox = Outbox::new(&schema).unwrap();
    produce(&pool, &outbox, vec![event(&queue, "k", 1)]).await;
    wait_until(QUICK, "delivery through the logical wake-up", || async {
        unsent(&pool, &schema).await == 0
    })
    .await;
    assert!(
        !relay.output().contains("permission denied"),
        "{}",
        relay.output()
    );
}
