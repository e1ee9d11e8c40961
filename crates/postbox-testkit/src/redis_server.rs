//! A `redis-server` of a test's own.

use crate::{free_port, self_signed_cert, suffix, wait_until};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// A test-owned `redis-server` with `appendonly yes` and `appendfsync always`
/// on a free port, so a test can stop, kill and restart it without touching
/// the shared Redis.
pub struct RedisServer {
    port: u16,
    dir: PathBuf,
    child: Option<Child>,
    /// TLS only (no plain port), with a self-signed certificate in `dir`.
    tls: bool,
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
            tls: false,
        };
        s.restart().await;
        s
    }

    /// Start one that speaks TLS only, with a fresh self-signed certificate.
    pub async fn start_tls() -> Self {
        let port = free_port();
        let dir = std::env::temp_dir().join(format!("postbox-redis-tls-{port}-{}", suffix()));
        self_signed_cert(&dir);
        let mut s = RedisServer {
            port,
            dir,
            child: None,
            tls: true,
        };
        s.restart().await;
        s
    }

    /// `redis://127.0.0.1:<port>`, or for a TLS server
    /// `rediss://127.0.0.1:<port>/#insecure` (its certificate is self-signed).
    pub fn url(&self) -> String {
        if self.tls {
            format!("rediss://127.0.0.1:{}/#insecure", self.port)
        } else {
            format!("redis://127.0.0.1:{}", self.port)
        }
    }

    /// Port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// (Re)start on the same port and data directory (the AOF is replayed).
    pub async fn restart(&mut self) {
        assert!(self.child.is_none(), "redis-server already running");
        let port = self.port.to_string();
        let (cert, key) = (self.dir.join("cert.pem"), self.dir.join("key.pem"));
        let listen: Vec<&str> = if self.tls {
            vec![
                "--port",
                "0",
                "--tls-port",
                &port,
                "--tls-cert-file",
                cert.to_str().unwrap(),
                "--tls-key-file",
                key.to_str().unwrap(),
                "--tls-auth-clients",
                "no",
            ]
        } else {
            vec!["--port", &port]
        };
        let child = Command::new("redis-server")
            .args(listen)
            .args([
                "--bind",
                "127.0.0.1",
                "--appendonly",
                "yes",
                // Every acknowledged write on disk before the reply: with the
                // default `everysec`, Redis answers while a slow fsync holds
                // back its write, and a SIGKILL then loses what it answered
                // (seen as a flaky redis_outage test on a loaded machine).
                "--appendfsync",
                "always",
                "--save",
                "",
                "--dir",
                self.dir.to_str().unwrap(),
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server not found on PATH (./scripts/test.sh installs it)");
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
