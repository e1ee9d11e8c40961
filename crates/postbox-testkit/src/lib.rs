//! Shared test support: connection URLs, per-test schemas and queue names,
//! throwaway `redis-server` instances, and waiting on conditions instead of sleeping.

use std::future::Future;
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
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

/// A free TCP port on loopback (racy by nature, good enough for tests).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("no free port")
}

/// A test-owned `redis-server` with `appendonly yes` on a free port, so a
/// test can stop, kill and restart it without touching the shared Redis.
pub struct RedisServer {
    port: u16,
    dir: PathBuf,
    child: Option<Child>,
}

impl RedisServer {
    /// Start one and wait until it answers PING.
    pub async fn start() -> Self {
        let port = free_port();
        let dir = std::env::temp_dir().join(format!("postbox-redis-{port}-{}", suffix()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut s = RedisServer {
            port,
            dir,
            child: None,
        };
        s.restart().await;
        s
    }

    /// `redis://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// (Re)start on the same port and data directory (the AOF is replayed).
    pub async fn restart(&mut self) {
        assert!(self.child.is_none(), "redis-server already running");
        let child = Command::new("redis-server")
            .args([
                "--bind",
                "127.0.0.1",
                "--port",
                &self.port.to_string(),
                "--appendonly",
                "yes",
                "--save",
                "",
                "--dir",
                self.dir.to_str().unwrap(),
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server not found on PATH (scripts/setup.sh installs it)");
        self.child = Some(child);
        let url = self.url();
        wait_until(
            Duration::from_secs(10),
            "redis-server to answer PING",
            || {
                let url = url.clone();
                async move { ping(&url).await }
            },
        )
        .await;
    }

    /// SIGKILL the server (the AOF keeps what was acknowledged).
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Whether a Redis server at `url` answers PING.
pub async fn ping(url: &str) -> bool {
    let Ok(client) = redis::Client::open(url) else {
        return false;
    };
    match tokio::time::timeout(
        Duration::from_secs(1),
        client.get_multiplexed_async_connection(),
    )
    .await
    {
        Ok(Ok(mut c)) => redis::cmd("PING")
            .query_async::<String>(&mut c)
            .await
            .is_ok(),
        _ => false,
    }
}
