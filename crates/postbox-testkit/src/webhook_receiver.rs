//! A webhook receiver of a test's own, checking every signature with the
//! Standard Webhooks reference package.

use crate::{free_port, wait_until};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// `tests/node/webhook_receiver.mjs` (Node `standardwebhooks`) on a free
/// port: the first path segment of a request says how it answers (`ok`,
/// `flaky`, `hang`, `slow`, `gone`, `busy`, `moved`: see the script). Every
/// request it was asked is kept, across restarts.
pub struct WebhookReceiver {
    /// Its port on 127.0.0.1.
    pub port: u16,
    secret: String,
    tls: Option<PathBuf>,
    seen: Arc<Mutex<Vec<Value>>>,
    child: Option<tokio::process::Child>,
}

impl WebhookReceiver {
    /// Start one verifying with `secret` (`whsec_…`); over `https://` with
    /// `tls`'s `cert.pem` and `key.pem` when given.
    pub async fn start(secret: &str, tls: Option<&Path>) -> WebhookReceiver {
        let mut rx = WebhookReceiver {
            port: free_port(),
            secret: secret.to_owned(),
            tls: tls.map(ToOwned::to_owned),
            seen: Arc::default(),
            child: None,
        };
        rx.restart().await;
        rx
    }

    /// Start it (again, on the same port) and wait until it listens.
    pub async fn restart(&mut self) {
        use tokio::io::AsyncBufReadExt;
        let dir = PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/node"));
        let mut cmd = tokio::process::Command::new("node");
        cmd.arg(dir.join("webhook_receiver.mjs"))
            .arg(self.port.to_string())
            .arg(&self.secret)
            .current_dir(&dir)
            .stdout(std::process::Stdio::piped())
            .kill_on_drop(true);
        if let Some(d) = &self.tls {
            cmd.arg(d.join("cert.pem")).arg(d.join("key.pem"));
        }
        let mut child = cmd.spawn().expect("node (./scripts/test.sh installs it)");
        let mut lines = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
        let first = tokio::time::timeout(Duration::from_secs(60), lines.next_line())
            .await
            .expect("the receiver started")
            .unwrap()
            .unwrap_or_default();
        assert!(first.starts_with("listening"), "{first}");
        let seen = self.seen.clone();
        tokio::spawn(async move {
            while let Ok(Some(line)) = lines.next_line().await {
                if let Ok(v) = serde_json::from_str(&line) {
                    seen.lock().unwrap().push(v);
                }
            }
        });
        self.child = Some(child);
    }

    /// SIGKILL it.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.start_kill();
        }
    }

    /// The requests made to `mode` so far, as the script printed them:
    /// `{mode, id, verified, key, traceparent, body, at, headers}`.
    pub fn seen(&self, mode: &str) -> Vec<Value> {
        let seen = self.seen.lock().unwrap();
        seen.iter().filter(|v| v["mode"] == mode).cloned().collect()
    }

    /// Wait until `mode` has had at least `n` requests; return them.
    pub async fn wait_for(&self, mode: &str, n: usize, timeout: Duration) -> Vec<Value> {
        let what = format!("{n} requests to /{mode}/");
        wait_until(timeout, &what, || async { self.seen(mode).len() >= n }).await;
        self.seen(mode)
    }
}
