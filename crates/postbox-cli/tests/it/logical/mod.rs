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

mod setup;
mod streaming;

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
