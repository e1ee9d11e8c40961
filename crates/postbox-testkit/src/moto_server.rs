//! A local AWS (SQS, SNS) of a test's own: `moto` in server mode.

use crate::{free_port, wait_until};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// `moto_server` (PyPI `moto[server]`, pinned in `tests/python`) on a free
/// port. Use it with the static test credentials of [`MotoServer::env`].
pub struct MotoServer {
    port: u16,
    child: Child,
}

/// The test venv's `moto_server` (`./scripts/test.sh` installs it), beside
/// its Python.
fn program() -> PathBuf {
    std::env::var_os("POSTBOX_TEST_PYTHON")
        .and_then(|p| PathBuf::from(p).parent().map(|d| d.join("moto_server")))
        .unwrap_or_else(|| {
            PathBuf::from(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/../../tests/python/.venv/bin/moto_server"
            ))
        })
}

impl MotoServer {
    /// Start one and wait until it accepts connections.
    pub async fn start() -> Self {
        let port = free_port();
        let child = Command::new(program())
            .args(["-H", "127.0.0.1", "-p", &port.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| {
                panic!(
                    "cannot start {} ({e}): run ./scripts/test.sh, which installs moto[server] in tests/python/.venv",
                    program().display()
                )
            });
        wait_until(
            Duration::from_secs(30),
            "moto_server to accept connections",
            || async move {
                tokio::net::TcpStream::connect(("127.0.0.1", port))
                    .await
                    .is_ok()
            },
        )
        .await;
        MotoServer { port, child }
    }

    /// `http://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Static credentials and region for clients of this server.
    pub fn env() -> [(&'static str, &'static str); 3] {
        [
            ("AWS_ACCESS_KEY_ID", "test"),
            ("AWS_SECRET_ACCESS_KEY", "test"),
            ("AWS_REGION", "us-east-1"),
        ]
    }
}

impl Drop for MotoServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
