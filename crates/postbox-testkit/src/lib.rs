//! Shared test support: connection URLs, per-test schemas and names, and
//! waiting on conditions instead of sleeping; one module per service a test
//! starts of its own.
#![warn(missing_docs)]

mod http;
mod kafka;
mod moto_server;
mod nats_server;
mod pgbouncer;
mod postgres;
mod proxy;
mod rabbitmq_server;
mod redis_server;
mod relay_process;
mod tls;
mod webhook_receiver;

pub use http::http_get;
pub use kafka::{kafka_consume_independent, KafkaBroker};
pub use moto_server::MotoServer;
pub use nats_server::NatsServer;
pub use pgbouncer::PgBouncer;
pub use postgres::PgCluster;
pub use proxy::Proxy;
pub use rabbitmq_server::RabbitmqServer;
pub use redis_server::{ping, RedisServer};
pub use relay_process::RelayProcess;
pub use tls::{private_ca, self_signed_cert};
pub use webhook_receiver::WebhookReceiver;

use std::future::Future;
use std::net::TcpListener;
use std::time::{Duration, Instant};

/// PostgreSQL URL for tests: `DATABASE_URL`, else the local server.
pub fn database_url() -> String {
    std::env::var("DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres:postgres@127.0.0.1:5432/postgres".into())
}

/// Redis URL for tests that do not stop Redis: `REDIS_URL`, else the local server.
pub fn redis_url() -> String {
    std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into())
}

/// RabbitMQ URL for tests that do not stop the broker: `RABBITMQ_URL`, else
/// the local server with the default guest account.
pub fn rabbitmq_url() -> String {
    std::env::var("RABBITMQ_URL").unwrap_or_else(|_| "amqp://guest:guest@127.0.0.1:5672/%2f".into())
}

/// A short random lower-case suffix.
pub fn suffix() -> String {
    uuid::Uuid::new_v4().simple().to_string()[..10].to_owned()
}

/// A schema name no other test uses.
pub fn unique_schema(prefix: &str) -> String {
    format!("t_{prefix}_{}", suffix())
}

/// A pool on the test database.
pub async fn pool() -> sqlx::PgPool {
    sqlx::postgres::PgPoolOptions::new()
        .max_connections(8)
        .acquire_timeout(Duration::from_secs(30))
        .connect(&database_url())
        .await
        .unwrap_or_else(|e| panic!("cannot connect to test PostgreSQL at DATABASE_URL: {e}"))
}

/// Drop a test schema and everything in it.
pub async fn drop_schema(pool: &sqlx::PgPool, schema: &str) {
    let _ = sqlx::raw_sql(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE"))
        .execute(pool)
        .await;
}

/// Poll `cond` every 20 ms until it returns true; panic with `what` after `timeout`.
pub async fn wait_until<F, Fut>(timeout: Duration, what: &str, mut cond: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if cond().await {
            return;
        }
        if Instant::now() > deadline {
            panic!("timed out after {timeout:?} waiting for: {what}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Connect to a service a test needs, retrying for up to 30 s while it
/// refuses: a shared server under a loaded suite resets a connection now and
/// then, and a node of a test's own that was just restarted may still be
/// booting. The connection, or a panic that names the service and its last
/// error, so that a red run means a defect, not a busy machine.
pub async fn connect_retrying<T, E, F, Fut>(service: &str, mut connect: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, E>>,
    E: std::fmt::Display,
{
    const FOR: Duration = Duration::from_secs(30);
    let deadline = Instant::now() + FOR;
    let mut pause = Duration::from_millis(50);
    loop {
        match connect().await {
            Ok(connected) => return connected,
            Err(e) if Instant::now() >= deadline => {
                panic!("cannot connect to {service} within {FOR:?}: {e} (./scripts/test.sh starts the shared services)")
            }
            // A bounded backoff between attempts, not a wait for an event:
            // a refused connection says nothing about when to try again.
            Err(_) => {
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_secs(1));
            }
        }
    }
}

/// A free TCP port on loopback (racy by nature, good enough for tests).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("no free port")
}

/// A binary of this workspace built beside the running test (the `postbox`
/// CLI, the examples): `cargo nextest run --workspace` builds them all first.
pub fn workspace_bin(name: &str) -> std::path::PathBuf {
    let exe = std::env::current_exe().expect("the test's own path");
    // target/<profile>/deps/<test> → target/<profile>/<name>
    let bin = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("the test runs from target/<profile>/deps")
        .join(name);
    assert!(
        bin.exists(),
        "{} is not built: run the tests through ./scripts/test.sh (or `cargo build --workspace` first)",
        bin.display()
    );
    bin
}
