//! `--notify logical`: the relay follows the outbox's inserts by logical
//! decoding. The shared server has `wal_level = replica` and must stay as it
//! is, so everything that streams runs on a private cluster
//! (`postbox_testkit::PgCluster`); the refusal below logical runs on the
//! shared one. Polling is a minute away in these relays: only the replication
//! wake-up (or the rescan after it reconnects) can deliver within seconds.

use crate::support::*;
use postbox::migrate::WakeUp;
use postbox::{Event, Outbox, SchemaName};
use postbox_testkit::PgCluster;
use sqlx::PgPool;
use std::process::Command;
use std::time::{Duration, Instant};

/// Delivery "quickly": far below the 60 s poll, generous for a busy 2-core box.
const QUICK: Duration = Duration::from_secs(5);

fn migrate(url: &str, schema: &str, notify: &str) -> std::process::Output {
    Command::new(BIN)
        .args([
            "migrate",
            "--database-url",
            url,
            "--schema",
            schema,
            "--notify",
            notify,
        ])
        .output()
        .unwrap()
}

fn assert_ok(out: &std::process::Output) {
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

async fn private_pool(url: &str) -> PgPool {
    sqlx::postgres::PgPoolOptions::new()
        .max_connections(4)
        .connect(url)
        .await
        .unwrap()
}

/// The outbox's non-internal triggers.
async fn triggers(pool: &PgPool, schema: &str) -> Vec<String> {
    sqlx::query_scalar(&format!(
        "SELECT tgname::text FROM pg_trigger WHERE tgrelid = '{schema}.outbox'::regclass AND NOT tgisinternal ORDER BY 1"
    ))
    .fetch_all(pool)
    .await
    .unwrap()
}

/// (publication, publishes insert, update, delete) of the schema's publication, if any.
async fn publication(pool: &PgPool, schema: &str) -> Option<(String, bool, bool, bool)> {
    let name = postbox::migrate::publication_name(&SchemaName::new(schema).unwrap());
    sqlx::query_as(
        "SELECT pubname::text, pubinsert, pubupdate, pubdelete FROM pg_publication WHERE pubname = $1",
    )
    .bind(name)
    .fetch_optional(pool)
    .await
    .unwrap()
}

/// postbox's replication slots: (name, temporary).
async fn slots(pool: &PgPool) -> Vec<(String, bool)> {
    sqlx::query_as(
        "SELECT slot_name::text, temporary FROM pg_replication_slots WHERE slot_name LIKE 'postbox%' ORDER BY 1",
    )
    .fetch_all(pool)
    .await
    .unwrap()
}

/// A relay on the private cluster, polling only every minute.
fn relay(url: &str, schema: &str, redis: &str) -> RelayProcess {
    relay_polling(url, schema, redis, "60s")
}

fn relay_polling(url: &str, schema: &str, redis: &str, poll: &str) -> RelayProcess {
    let args = vec![
        "--database-url",
        url,
        "--schemas",
        schema,
        "--redis-url",
        redis,
        "--poll-interval",
        poll,
        "--rebalance-interval",
        "200ms",
        "--backoff-max",
        "500ms",
        "--publish-timeout",
        "3s",
    ];
    RelayProcess::spawn(BIN, &args, &[])
}

/// One event per transaction.
async fn produce(pool: &PgPool, outbox: &Outbox, events: Vec<Event>) {
    for e in events {
        let mut tx = pool.begin().await.unwrap();
        outbox.enqueue(&mut tx, e).await.unwrap();
        tx.commit().await.unwrap();
    }
}

async fn unsent(pool: &PgPool, schema: &str) -> i64 {
    sqlx::query_scalar(&format!(
        "SELECT count(*) FROM {schema}.outbox WHERE sent_at IS NULL"
    ))
    .fetch_one(pool)
    .await
    .unwrap()
}

/// The relay has consolidated and gone to sleep (a worker arms its
/// partitions just before sleeping; harmless under `logical`).
async fn wait_idle(pool: &PgPool, schema: &str) {
    wait_until(LONG, "the relay to consolidate and sleep", || async {
        asleep_consolidated(pool, schema, 1).await
    })
    .await;
}

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

/// On a logical server: no trigger, an insert-only publication, one temporary
/// slot; events arrive quickly and in per-key order with polling a minute
/// away; the slot is gone when the relay is stopped or killed; another policy
/// drops the publication again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logical_wakeup_delivers_without_trigger_and_leaves_no_slot() {
    let pg = PgCluster::start_logical().await;
    let redis = RedisServer::start().await;
    let url = pg.url();
    let pool = private_pool(&url).await;
    let schema = postbox_testkit::unique_schema("logical");
    let queue = format!("{schema}-q");
    let out = migrate(&url, &schema, "logical");
    assert_ok(&out);
    assert!(String::from_utf8_lossy(&out.stdout).contains("applied migrations"));
    assert!(
        triggers(&pool, &schema).await.is_empty(),
        "no NOTIFY trigger"
    );
    let (_, ins, upd, del) = publication(&pool, &schema).await.expect("publication");
    assert!(ins && !upd && !del, "inserts only");

    let relay1 = relay(&url, &schema, &redis.url());
    relay1
        .wait_for_line("logical wake-up streaming", LONG)
        .await;
    let s = slots(&pool).await;
    assert!(
        s.len() == 1 && s[0].1,
        "one temporary slot while it runs: {s:?}"
    );
    assert!(s[0].0.starts_with("postbox_relay_"), "{s:?}");
    wait_idle(&pool, &schema).await;

    // A burst over four keys, one transaction each.
    const N: usize = 40;
    let outbox = Outbox::new(&schema).unwrap();
    let started = Instant::now();
    produce(
        &pool,
        &outbox,
        (0..N)
            .map(|i| event(&queue, &format!("k{}", i % 4), i))
            .collect(),
    )
    .await;
    let view = RedisView::new(&redis.url(), &queue).await;
    wait_until(
        QUICK,
        "the burst delivered through logical wake-up",
        || async { view.wait_len().await == N },
    )
    .await;
    eprintln!(
        "{N} events delivered {:?} after the first insert",
        started.elapsed()
    );
    assert_per_key_order(&view.waiting().await);

    // One event to a relay that went back to sleep.
    wait_idle(&pool, &schema).await;
    produce(&pool, &outbox, vec![event(&queue, "k0", N)]).await;
    wait_until(QUICK, "one event to an idle relay", || async {
        unsent(&pool, &schema).await == 0
    })
    .await;
    assert_eq!(view.wait_len().await, N + 1);

    // Stopped: exits 0, and the temporary slot is gone with its session.
    relay1.signal("TERM");
    let mut relay1 = relay1;
    assert_eq!(relay1.wait(LONG).await, Some(0), "{}", relay1.output());
    wait_until(Duration::from_secs(10), "no slot after SIGTERM", || async {
        slots(&pool).await.is_empty()
    })
    .await;

    // Killed: the server drops the slot when it notices the session is gone.
    let mut relay2 = relay(&url, &schema, &redis.url());
    relay2
        .wait_for_line("logical wake-up streaming", LONG)
        .await;
    assert_eq!(slots(&pool).await.len(), 1);
    relay2.signal("KILL");
    assert_eq!(relay2.wait(LONG).await, None);
    wait_until(Duration::from_secs(20), "no slot after SIGKILL", || async {
        slots(&pool).await.is_empty()
    })
    .await;

    // Another policy drops the publication; logical again brings it back.
    assert_ok(&migrate(&url, &schema, "adaptive"));
    assert_eq!(publication(&pool, &schema).await, None);
    assert_eq!(triggers(&pool, &schema).await, ["outbox_notify_adaptive"]);
    assert_ok(&migrate(&url, &schema, "logical"));
    assert!(publication(&pool, &schema).await.is_some());
    assert!(triggers(&pool, &schema).await.is_empty());
}

/// The walsender is terminated: a row committed in the gap and one committed
/// after the new session started are both delivered quickly (the relay
/// reconnects and rescans every logical schema).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logical_wakeup_reconnects_after_its_walsender_is_terminated() {
    let pg = PgCluster::start_logical().await;
    let redis = RedisServer::start().await;
    let url = pg.url();
    let pool = private_pool(&url).await;
    let schema = postbox_testkit::unique_schema("logrecon");
    let queue = format!("{schema}-q");
    let mut conn = pool.acquire().await.unwrap();
    postbox::migrate::run(
        &mut conn,
        &SchemaName::new(&schema).unwrap(),
        WakeUp::Logical,
    )
    .await
    .unwrap();
    drop(conn);
    let relay = relay(&url, &schema, &redis.url());
    relay.wait_for_line("logical wake-up streaming", LONG).await;
    wait_idle(&pool, &schema).await;
    let walsender = || async {
        sqlx::query_scalar::<_, i32>(
            "SELECT pid FROM pg_stat_replication WHERE application_name LIKE 'postbox-relay:%:logical'",
        )
        .fetch_optional(&pool)
        .await
        .unwrap()
    };
    let old = walsender().await.expect("the relay's walsender");
    let killed: bool = sqlx::query_scalar("SELECT pg_terminate_backend($1)")
        .bind(old)
        .fetch_one(&pool)
        .await
        .unwrap();
    assert!(killed);
    let outbox = Outbox::new(&schema).unwrap();
    // Committed while the stream is (most likely) down.
    produce(&pool, &outbox, vec![event(&queue, "k", 1)]).await;
    wait_until(QUICK, "the row committed in the gap", || async {
        unsent(&pool, &schema).await == 0
    })
    .await;
    wait_until(LONG, "a new walsender", || async {
        walsender().await.is_some_and(|p| p != old)
    })
    .await;
    wait_idle(&pool, &schema).await;
    produce(&pool, &outbox, vec![event(&queue, "k", 2)]).await;
    wait_until(QUICK, "a row through the new session", || async {
        unsent(&pool, &schema).await == 0
    })
    .await;
    let view = RedisView::new(&redis.url(), &queue).await;
    let seen = view.waiting().await;
    assert_eq!(seen.len(), 2);
    assert_per_key_order(&seen);
    let log = relay.output();
    assert!(
        log.contains("logical wake-up stream failed") && log.contains("reconnecting"),
        "{log}"
    );
    assert_eq!(
        slots(&pool).await.len(),
        1,
        "the old slot went with its session"
    );
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
