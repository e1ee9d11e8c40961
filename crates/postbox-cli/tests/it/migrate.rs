//! `postbox migrate`: idempotent, versioned, refuses bad names before any SQL.

use crate::support::*;
use std::process::Command;

#[tokio::test]
async fn migrate_is_idempotent_and_versioned() {
    let pool = postbox_testkit::pool().await;
    let schema = postbox_testkit::unique_schema("mig");
    let run = || {
        Command::new(BIN)
            .args([
                "migrate",
                "--database-url",
                &postbox_testkit::database_url(),
                "--schema",
                &schema,
            ])
            .output()
            .unwrap()
    };
    let first = run();
    assert!(
        first.status.success(),
        "{}",
        String::from_utf8_lossy(&first.stderr)
    );
    assert!(String::from_utf8_lossy(&first.stdout)
        .contains("applied migrations [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]"));
    let second = run();
    assert!(second.status.success());
    assert!(
        String::from_utf8_lossy(&second.stdout).contains("up to date"),
        "{}",
        String::from_utf8_lossy(&second.stdout)
    );

    let tables: Vec<String> = sqlx::query_scalar(
        "SELECT table_name::text FROM information_schema.tables WHERE table_schema = $1 ORDER BY 1",
    )
    .bind(&schema)
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(
        tables,
        [
            "inbox",
            "inbox_dead_letter",
            "outbox",
            "outbox_dead_letter",
            "outbox_wakeup",
            "postbox_migrations"
        ]
    );
    let versions: Vec<i32> = sqlx::query_scalar(&format!(
        "SELECT version FROM {schema}.postbox_migrations ORDER BY 1"
    ))
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(versions, [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]);

    // A tampered migration is reported, not silently re-run.
    sqlx::query(&format!(
        "UPDATE {schema}.postbox_migrations SET checksum = 'x' WHERE version = 2"
    ))
    .execute(&pool)
    .await
    .unwrap();
    let third = run();
    assert!(!third.status.success());
    let stderr = String::from_utf8_lossy(&third.stderr);
    assert!(
        stderr.contains("was applied with checksum x, this build has")
            && stderr.contains("applied migration files must not change"),
        "{stderr}"
    );
    postbox_testkit::drop_schema(&pool, &schema).await;
}

#[tokio::test]
async fn concurrent_migrations_do_not_collide() {
    let pool = postbox_testkit::pool().await;
    let schema = postbox::SchemaName::new(&postbox_testkit::unique_schema("migc")).unwrap();
    // Four sessions at once (joined, not spawned: they only need to overlap in PostgreSQL).
    let mut conns = Vec::new();
    for _ in 0..4 {
        conns.push(pool.acquire().await.unwrap());
    }
    let runs = conns
        .iter_mut()
        .map(|c| postbox::migrate::run(c, &schema, Default::default()));
    let applied: usize = futures::future::join_all(runs)
        .await
        .into_iter()
        .map(|r| r.unwrap().applied.len())
        .sum();
    assert_eq!(
        applied,
        postbox::migrate::migrations(&schema).len(),
        "each migration applied exactly once"
    );
    postbox_testkit::drop_schema(&pool, schema.as_str()).await;
}

#[test]
fn bad_schema_names_are_refused_before_any_sql() {
    let long = "a".repeat(70);
    for bad in ["x\"; drop table y;--", "Consumers", long.as_str()] {
        // An unreachable database: if any SQL were attempted we would see a connection error instead.
        let out = Command::new(BIN)
            .args([
                "migrate",
                "--database-url",
                "postgres://nobody@127.0.0.1:1/none",
                "--schema",
                bad,
            ])
            .output()
            .unwrap();
        assert!(!out.status.success());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("invalid schema name"), "{bad}: {err}");
        assert!(err.contains("a-z, 0-9 and _"), "{err}");
        assert!(!err.contains("connect"), "{err}");
    }
}

#[test]
fn print_exports_the_sql() {
    let out = Command::new(BIN)
        .args(["migrate", "--schema", "shop", "--print"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let sql = String::from_utf8_lossy(&out.stdout);
    assert!(sql.contains("CREATE TABLE shop.outbox"));
    assert!(sql.contains("CREATE TABLE shop.inbox"));
    assert!(sql.contains("FOR EACH STATEMENT"));
}

/// A schema missing this build's newest migration: the relay refuses to start
/// and says which command fixes it.
#[tokio::test]
async fn relay_refuses_an_outdated_schema() {
    let ctx = Ctx::new("outdated").await;
    sqlx::query(&format!(
        "DELETE FROM {}.postbox_migrations WHERE version = 10",
        ctx.schema
    ))
    .execute(&ctx.pool)
    .await
    .unwrap();
    let mut relay = ctx.relay(&postbox_testkit::redis_url(), &[], &[]);
    assert_eq!(relay.wait(LONG).await, Some(1));
    let out = relay.output();
    assert!(
        out.contains(&format!(
            "schema \"{}\" is at migration 9, this postbox needs 10; run `postbox migrate --schema {}` first",
            ctx.schema, ctx.schema
        )),
        "{out}"
    );
    ctx.cleanup().await;
}
