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
        .contains("applied migrations [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14]"));
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
            "console_audit",
            "inbox",
            "inbox_dead_letter",
            "outbox",
            "outbox_dead_letter",
            "outbox_delivered",
            "outbox_relays",
            "outbox_scheduled",
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
    assert_eq!(versions, [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14]);

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

fn postbox(args: &[&str]) -> String {
    let out = Command::new(BIN).args(args).output().unwrap();
    assert!(
        out.status.success(),
        "postbox {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// What a migration tool (Flyway, sqlx, Atlas…) does with a file: psql, one
/// transaction, stop at the first error.
fn psql(sql: &str) {
    use std::io::Write;
    let mut child = Command::new("psql")
        .args([
            &postbox_testkit::database_url(),
            "-X",
            "-q",
            "-v",
            "ON_ERROR_STOP=1",
            "--single-transaction",
            "-f",
            "-",
        ])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("psql (Debian's postgresql-client)");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(sql.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "psql: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `migrate --print` is what `migrate` runs, bookkeeping included: a schema
/// made from it works with every command, keeps the wake-up policy printed,
/// and takes the next build's migrations from `--print --since` or from
/// `postbox migrate` itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schema_made_from_the_printed_sql_works_and_migrates_further() {
    let ctx = Ctx::new("printed").await;
    let db = postbox_testkit::database_url();
    let s = ctx.schema.as_str();
    postbox_testkit::drop_schema(&ctx.pool, s).await;
    let last = postbox::migrate::migrations(&postbox::SchemaName::new(s).unwrap())
        .last()
        .unwrap()
        .version;

    // An earlier build's script: everything before the position read path
    // (0010), so the status shows the old one.
    let position = postbox::migrate::CLAIM_BY_POSITION;
    let full = postbox(&["migrate", "--schema", s, "--print", "--notify", "statement"]);
    let cut = full
        .find(&format!("(version {position}, checksum"))
        .and_then(|i| full[..i].rfind("\n-- "))
        .expect("each migration is marked");
    psql(&full[..cut]);
    let status = postbox(&["status", "--database-url", &db, "--schema", s]);
    assert!(
        status.contains("read path: each claim reads its partitions from their first unsent row"),
        "{status}"
    );

    // The upgrade as a migration tool takes it: what comes after the version
    // the schema is at, with --notify to set the policy.
    let upgrade = postbox(&[
        "migrate",
        "--schema",
        s,
        "--print",
        "--since",
        &(position - 1).to_string(),
        "--notify",
        "statement",
    ]);
    assert!(!upgrade.contains("(version 1,"), "{upgrade}");
    psql(&upgrade);
    let status = postbox(&["status", "--database-url", &db, "--schema", s]);
    assert!(
        status.contains("read path: each claim starts at its partition's position"),
        "{status}"
    );
    assert!(status.contains("wake-up: statement"), "{status}");

    // `postbox migrate` takes the schema over, keeping the policy.
    let again = postbox(&["migrate", "--database-url", &db, "--schema", s]);
    assert!(
        again.contains("up to date") && again.contains("wake-up statement"),
        "{again}"
    );
    let versions: Vec<i32> = sqlx::query_scalar(&format!(
        "SELECT version FROM {s}.postbox_migrations ORDER BY 1"
    ))
    .fetch_all(&ctx.pool)
    .await
    .unwrap();
    assert_eq!(versions, (1..=last).collect::<Vec<_>>());

    // Every command works on it; the relay delivers what producers wrote.
    ctx.produce((1..=3).map(|i| ctx.event("k", i)).collect())
        .await;
    let redis = postbox_testkit::redis_url();
    let relay = ctx.relay(&redis, &[], &[]);
    wait_until(LONG, "the printed schema's events relayed", || async {
        ctx.unsent().await == 0
    })
    .await;
    drop(relay);
    assert_eq!(RedisView::new(&redis, &ctx.queue).await.wait_len().await, 3);
    for args in [vec!["dlq", "list"], vec!["inbox-dlq", "list"]] {
        let mut args = args.clone();
        args.extend(["--database-url", &db, "--schema", s]);
        postbox(&args);
    }

    // Each policy is printed as asked.
    for policy in ["adaptive", "off"] {
        let sql = postbox(&["migrate", "--schema", s, "--print", "--notify", policy]);
        assert!(
            sql.contains(&format!("-- wake-up policy: {policy}")),
            "{policy}"
        );
    }
    ctx.cleanup().await;
}

/// A schema missing this build's newest migration: the relay refuses to start
/// and says which command fixes it.
#[tokio::test]
async fn relay_refuses_an_outdated_schema() {
    let ctx = Ctx::new("outdated").await;
    sqlx::query(&format!(
        "DELETE FROM {}.postbox_migrations WHERE version = 14",
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
            "schema \"{}\" is at migration 13, this postbox needs 14; run `postbox migrate --schema {}` first",
            ctx.schema, ctx.schema
        )),
        "{out}"
    );
    ctx.cleanup().await;
}
