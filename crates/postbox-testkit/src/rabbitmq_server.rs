//! A RabbitMQ node of a test's own.

use crate::{free_port, suffix, wait_until};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// A test-owned RabbitMQ node on free ports with its data in a temp
/// directory and no plugins, so a test (or the chaos harness) can kill and
/// restart it without touching the shared server, and set limits of its own
/// (`max_message_size`). Durable queues and persistent messages survive a
/// restart, as on a real node. Booting takes about five seconds.
pub struct RabbitmqServer {
    port: u16,
    dist_port: u16,
    dir: PathBuf,
    child: Option<Child>,
}

/// Debian's package puts the real start script here; the one on `PATH` is a
/// wrapper that switches to the `rabbitmq` user, who cannot write our temp
/// directory.
const SERVER: &str = "/usr/lib/rabbitmq/bin/rabbitmq-server";

impl RabbitmqServer {
    /// Start one with `extra` lines in its `rabbitmq.conf` (e.g.
    /// `max_message_size = 65536`) and wait until it accepts AMQP connections.
    pub async fn start(extra: &str) -> Self {
        let (port, dist_port) = (free_port(), free_port());
        let dir = std::env::temp_dir().join(format!("postbox-rabbitmq-{port}-{}", suffix()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("enabled_plugins"), "[].\n").unwrap();
        std::fs::write(dir.join("rabbitmq.conf"), format!("{extra}\n")).unwrap();
        let mut s = RabbitmqServer {
            port,
            dist_port,
            dir,
            child: None,
        };
        s.restart().await;
        s
    }

    /// `amqp://guest:guest@127.0.0.1:<port>/%2f`.
    pub fn url(&self) -> String {
        format!("amqp://guest:guest@127.0.0.1:{}/%2f", self.port)
    }

    /// (Re)start on the same ports and data directory.
    pub async fn restart(&mut self) {
        assert!(self.child.is_none(), "RabbitMQ node already running");
        let program = if std::path::Path::new(SERVER).exists() {
            SERVER
        } else {
            "rabbitmq-server"
        };
        let d = |name: &str| self.dir.join(name);
        let child = Command::new(program)
            .env(
                "RABBITMQ_NODENAME",
                format!("postbox{}@localhost", self.port),
            )
            .env("RABBITMQ_NODE_IP_ADDRESS", "127.0.0.1")
            .env("RABBITMQ_NODE_PORT", self.port.to_string())
            .env("RABBITMQ_DIST_PORT", self.dist_port.to_string())
            .env("RABBITMQ_MNESIA_BASE", d("mnesia"))
            .env("RABBITMQ_LOG_BASE", d("log"))
            .env("RABBITMQ_ENABLED_PLUGINS_FILE", d("enabled_plugins"))
            .env("RABBITMQ_CONFIG_FILE", d("rabbitmq.conf"))
            .env("RABBITMQ_PID_FILE", d("pid"))
            .env("RABBITMQ_FEATURE_FLAGS_FILE", d("feature_flags"))
            // Its own process group: the start script runs the Erlang VM as
            // a child, and a kill must take both.
            .process_group(0)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("rabbitmq-server not found (./scripts/test.sh installs it)");
        self.child = Some(child);
        let port = self.port;
        wait_until(
            Duration::from_secs(60),
            "the test's RabbitMQ node to accept connections",
            || async move {
                tokio::net::TcpStream::connect(("127.0.0.1", port))
                    .await
                    .is_ok()
            },
        )
        .await;
    }

    /// SIGTERM the node (its start script stops the VM cleanly) and wait for
    /// it to exit; SIGKILL if it has not within 30 s.
    pub fn stop(&mut self) {
        if let Some(c) = self.child.as_mut() {
            let _ = Command::new("kill")
                .args(["-TERM", "--", &format!("-{}", c.id())])
                .stderr(Stdio::null())
                .status();
            let deadline = std::time::Instant::now() + Duration::from_secs(30);
            while std::time::Instant::now() < deadline {
                if let Ok(Some(_)) = c.try_wait() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        self.kill();
    }

    /// SIGKILL the node (the VM and its start script).
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = Command::new("kill")
                .args(["-KILL", "--", &format!("-{}", c.id())])
                .stderr(Stdio::null())
                .status();
            let _ = c.wait();
            // The VM may outlive its script for a moment; its port must be
            // free before a restart.
            let port = self.port;
            for _ in 0..200 {
                if std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        }
    }
}

impl Drop for RabbitmqServer {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
