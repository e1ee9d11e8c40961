//! The processes of a run: the harness's own Redis and the chat's services
//! and relays, each a real child process whose output feeds the history.

use crate::history::History;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};
use tokio::process::{Child, Command};

/// A binary built next to this one (`cargo build -p chat -p postbox-cli`).
pub fn sibling(name: &str) -> Result<PathBuf, chat::Error> {
    let p = std::env::current_exe()?.with_file_name(name);
    if p.exists() {
        Ok(p)
    } else {
        Err(format!(
            "{} not found: build it first (cargo build --release -p chat -p postbox-cli -p chaos)",
            p.display()
        )
        .into())
    }
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// One child process; killed if dropped.
pub struct Proc {
    pub name: String,
    program: PathBuf,
    args: Vec<String>,
    env: Vec<(String, String)>,
    child: Option<Child>,
    history: History,
}

impl Proc {
    pub fn new(name: &str, program: PathBuf, args: Vec<String>, history: History) -> Self {
        Proc {
            name: name.to_owned(),
            program,
            args,
            env: Vec::new(),
            child: None,
            history,
        }
    }

    /// Start (or start again) with `extra_env` for this start only.
    pub fn start(&mut self, extra_env: &[(&str, &str)]) -> Result<(), chat::Error> {
        let mut cmd = Command::new(&self.program);
        cmd.args(&self.args)
            .env("RUST_LOG", "warn,sqlx=error,bullmq=error")
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        for (k, v) in self
            .env
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .chain(extra_env.iter().copied())
        {
            cmd.env(k, v);
        }
        let mut child = cmd
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", self.program.display()))?;
        let verbose = std::env::var("CHAOS_VERBOSE").is_ok();
        let (h, name) = (self.history.clone(), self.name.clone());
        chat::lines::forward_lines(&mut child, move |l| {
            if verbose {
                eprintln!("[{name}] {l}");
            }
            h.ingest(&name, l);
        });
        self.child = Some(child);
        Ok(())
    }

    /// Send a signal by name ("TERM", "KILL", "STOP", "CONT").
    pub fn signal(&self, sig: &str) {
        if let Some(pid) = self.child.as_ref().and_then(|c| c.id()) {
            let _ = std::process::Command::new("kill")
                .args([&format!("-{sig}"), &pid.to_string()])
                .status();
        }
    }

    /// Process id while running.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().and_then(|c| c.id())
    }

    /// Its exit status, if it has exited (without being waited for by us).
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child.as_mut()?.try_wait().ok().flatten()
    }

    /// SIGTERM and wait for the exit (a deploy's stop).
    pub async fn stop(&mut self) -> Result<(), chat::Error> {
        self.signal("TERM");
        self.wait_exit(Duration::from_secs(20)).await
    }

    pub async fn wait_exit(&mut self, timeout: Duration) -> Result<(), chat::Error> {
        if let Some(mut c) = self.child.take() {
            match tokio::time::timeout(timeout, c.wait()).await {
                Ok(_) => {}
                Err(_) => {
                    let _ = c.kill().await;
                    return Err(format!("{} did not stop within {timeout:?}", self.name).into());
                }
            }
        }
        Ok(())
    }
}

/// The harness's own Redis with `appendonly yes` and `appendfsync always`
/// (what it acknowledged survives a SIGKILL), on a free port.
pub struct Redis {
    pub port: u16,
    dir: PathBuf,
    proc: Proc,
}

impl Redis {
    pub async fn start(history: History) -> Result<Self, chat::Error> {
        let port = free_port();
        let dir = std::env::temp_dir().join(format!("postbox-chaos-redis-{port}"));
        std::fs::create_dir_all(&dir)?;
        let args = [
            "--bind",
            "127.0.0.1",
            "--port",
            &port.to_string(),
            "--appendonly",
            "yes",
            "--appendfsync",
            "always",
            "--save",
            "",
            "--dir",
            dir.to_str().unwrap(),
        ]
        .map(String::from)
        .to_vec();
        let program = which("redis-server")?;
        let mut r = Redis {
            port,
            dir,
            proc: Proc::new("redis", program, args, history),
        };
        r.up().await?;
        Ok(r)
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    pub async fn up(&mut self) -> Result<(), chat::Error> {
        self.proc.start(&[])?;
        let deadline = Instant::now() + Duration::from_secs(10);
        while tokio::net::TcpStream::connect(("127.0.0.1", self.port))
            .await
            .is_err()
        {
            if Instant::now() > deadline {
                return Err("redis-server did not start".into());
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Ok(())
    }

    /// SIGKILL: what was acknowledged is in the AOF (written before replying).
    pub async fn kill(&mut self) -> Result<(), chat::Error> {
        self.proc.signal("KILL");
        self.proc.wait_exit(Duration::from_secs(10)).await
    }

    /// Send a signal ("STOP" hangs it, "CONT" resumes it).
    pub fn signal(&self, sig: &str) {
        self.proc.signal(sig);
    }

    /// A clean stop (AOF flushed), as an outage or maintenance would be.
    pub async fn down(&mut self) -> Result<(), chat::Error> {
        self.proc.stop().await
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        self.proc.signal("KILL");
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn which(name: &str) -> Result<PathBuf, chat::Error> {
    std::env::var_os("PATH")
        .and_then(|paths| {
            std::env::split_paths(&paths)
                .map(|p| p.join(name))
                .find(|p| p.exists())
        })
        .ok_or_else(|| format!("{name} not found on PATH (apt-get install redis-server)").into())
}
