//! A `postbox relay` child process whose output tests can wait on.

use crate::wait_until;
use std::process::{Command, Stdio};
use std::time::Duration;

/// A `postbox relay` child process (killed on drop). Its stderr is collected
/// so tests can wait for log lines (e.g. a failpoint) instead of sleeping.
pub struct RelayProcess {
    child: tokio::process::Child,
    lines: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
    reader: Option<tokio::task::JoinHandle<()>>,
}

impl RelayProcess {
    /// Spawn `bin relay` with `args` and extra environment `env`.
    pub fn spawn(bin: &str, args: &[&str], env: &[(&str, &str)]) -> Self {
        use tokio::io::AsyncBufReadExt;
        let mut cmd = tokio::process::Command::new(bin);
        cmd.arg("relay")
            .args(args)
            .env(
                "RUST_LOG",
                std::env::var("RELAY_LOG").unwrap_or_else(|_| "info".into()),
            )
            .env("NO_COLOR", "1")
            .env_remove("POSTBOX_CONFIG")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().expect("spawn postbox relay");
        let lines = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let stderr = child.stderr.take().unwrap();
        let sink = lines.clone();
        let reader = tokio::spawn(async move {
            let mut r = tokio::io::BufReader::new(stderr).lines();
            while let Ok(Some(l)) = r.next_line().await {
                if std::env::var("RELAY_ECHO").is_ok() {
                    eprintln!("[relay] {l}");
                }
                sink.lock().unwrap().push(l);
            }
        });
        RelayProcess {
            child,
            lines,
            reader: Some(reader),
        }
    }

    /// Process id.
    pub fn pid(&self) -> u32 {
        self.child.id().expect("relay already reaped")
    }

    /// Everything it wrote to stderr so far.
    pub fn output(&self) -> String {
        self.lines.lock().unwrap().join("\n")
    }

    /// Wait until a stderr line contains `needle`.
    pub async fn wait_for_line(&self, needle: &str, timeout: Duration) {
        let lines = self.lines.clone();
        let n = needle.to_owned();
        wait_until(timeout, &format!("relay to log {needle:?}"), || {
            let found = lines.lock().unwrap().iter().any(|l| l.contains(&n));
            async move { found }
        })
        .await;
    }

    /// Send a signal (`"KILL"`, `"TERM"`, `"STOP"`, `"CONT"`).
    pub fn signal(&self, sig: &str) {
        let status = Command::new("kill")
            .args([&format!("-{sig}"), &self.pid().to_string()])
            .status()
            .expect("kill");
        assert!(status.success(), "kill -{sig} failed");
    }

    /// Wait for exit (up to `timeout`) and return the exit code (None if by signal).
    pub async fn wait(&mut self, timeout: Duration) -> Option<i32> {
        match tokio::time::timeout(timeout, self.child.wait()).await {
            Ok(Ok(s)) => {
                // Its last lines may still be in the pipe: read to EOF first.
                if let Some(r) = self.reader.take() {
                    let _ = tokio::time::timeout(Duration::from_secs(5), r).await;
                }
                s.code()
            }
            Ok(Err(e)) => panic!("wait failed: {e}"),
            Err(_) => panic!("relay did not exit within {timeout:?}\n{}", self.output()),
        }
    }
}
