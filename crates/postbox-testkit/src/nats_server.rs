//! A `nats-server` with JetStream of a test's own.

use crate::{free_port, suffix, wait_until};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// A test-owned `nats-server -js` on a free port with its store in a temp
/// directory, so a test can kill and restart it without touching the shared
/// server, and set limits (`max_payload`) of its own.
pub struct NatsServer {
    port: u16,
    dir: PathBuf,
    child: Option<Child>,
}

impl NatsServer {
    /// Start one with `extra` lines in its config file (e.g. `max_payload: 4096`)
    /// and wait until it accepts connections.
    pub async fn start(extra: &str) -> Self {
        let port = free_port();
        let mut s = Self::configured(port, extra);
        s.restart().await;
        s
    }

    /// A JetStream cluster of `n` servers routed to each other (streams can
    /// have up to `n` replicas), each started and accepting connections.
    /// JetStream elects its meta leader a moment later: retry the first
    /// stream creation.
    pub async fn start_cluster(n: usize) -> Vec<Self> {
        let ports: Vec<(u16, u16)> = (0..n).map(|_| (free_port(), free_port())).collect();
        let routes = ports
            .iter()
            .map(|(_, route)| format!("nats-route://127.0.0.1:{route}"))
            .collect::<Vec<_>>()
            .join(", ");
        let mut servers = Vec::new();
        for (i, (port, route)) in ports.iter().enumerate() {
            let cluster = format!(
                "server_name: n{i}_{port}\ncluster {{\n  name: postbox\n  listen: 127.0.0.1:{route}\n  routes: [{routes}]\n}}\n"
            );
            servers.push(Self::configured(*port, &cluster));
        }
        for s in &mut servers {
            s.restart().await;
        }
        servers
    }

    /// A server's directory and config file, not started.
    fn configured(port: u16, extra: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("postbox-nats-{port}-{}", suffix()));
        std::fs::create_dir_all(dir.join("js")).unwrap();
        std::fs::write(
            dir.join("nats.conf"),
            format!(
                "listen: 127.0.0.1:{port}\njetstream {{\n  store_dir: {:?}\n}}\n{}\n",
                dir.join("js").to_str().unwrap(),
                extra
            ),
        )
        .unwrap();
        NatsServer {
            port,
            dir,
            child: None,
        }
    }

    /// `nats://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    /// (Re)start on the same port and store (streams and messages survive).
    pub async fn restart(&mut self) {
        assert!(self.child.is_none(), "nats-server already running");
        let child = Command::new("nats-server")
            .arg("-c")
            .arg(self.dir.join("nats.conf"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("nats-server not found on PATH (./scripts/test.sh installs it)");
        self.child = Some(child);
        let port = self.port;
        wait_until(
            Duration::from_secs(10),
            "nats-server to accept connections",
            || async move {
                tokio::net::TcpStream::connect(("127.0.0.1", port))
                    .await
                    .is_ok()
            },
        )
        .await;
    }

    /// SIGTERM the server and wait for it to exit (a clean shutdown, its
    /// store flushed).
    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = Command::new("kill")
                .args(["-TERM", &c.id().to_string()])
                .status();
            let _ = c.wait();
        }
    }

    /// SIGKILL the server.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for NatsServer {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
