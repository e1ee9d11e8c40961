//! A PostgreSQL cluster owned by the harness, so it can be stopped hard
//! (`pg_ctl stop -m immediate`) without touching the machine's shared server:
//! `initdb` into a temporary directory, `pg_ctl start` on a free loopback
//! port. initdb refuses to run as root, so as root both run as the
//! `postgres` OS user. Dropping it stops the cluster and removes the directory.

use crate::infra::free_port;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

pub struct PgCluster {
    dir: PathBuf,
    bin: PathBuf,
    port: u16,
    as_postgres: bool,
}

impl PgCluster {
    /// initdb and start; the cluster is removed again if anything fails.
    pub async fn start() -> Result<PgCluster, chat::Error> {
        let bin = bin_dir()?;
        let port = free_port();
        let dir = std::env::temp_dir().join(format!(
            "postbox-chaos-pg-{port}-{}",
            &uuid::Uuid::new_v4().simple().to_string()[..8]
        ));
        std::fs::create_dir_all(&dir)?;
        let as_postgres = std::fs::metadata("/proc/self")?.uid() == 0;
        // From here on, Drop cleans up.
        let c = PgCluster {
            dir,
            bin,
            port,
            as_postgres,
        };
        if as_postgres {
            run(std::process::Command::new("chown")
                .args(["postgres:postgres"])
                .arg(&c.dir))
            .await?;
        }
        let data = c.data();
        run(c.command("initdb").arg("-D").arg(&data).args([
            "-A",
            "trust",
            "-U",
            "postgres",
            "-E",
            "UTF8",
            "--locale=C",
            "--no-sync",
        ]))
        .await?;
        c.up().await?;
        Ok(c)
    }

    /// The superuser's URL.
    pub fn admin_url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    /// `pg_ctl start`, waiting until it accepts connections (crash recovery included).
    pub async fn up(&self) -> Result<(), chat::Error> {
        let opts = format!(
            "-c listen_addresses=127.0.0.1 -p {} -k {} -c max_connections=200",
            self.port,
            self.dir.display()
        );
        run(self
            .command("pg_ctl")
            .arg("-D")
            .arg(self.data())
            .arg("-l")
            .arg(self.dir.join("log"))
            .args(["-w", "-t", "60", "-o", &opts, "start"]))
        .await
    }

    /// `pg_ctl stop -m immediate`: every server process exits at once,
    /// without a checkpoint (a crash; the next start recovers from the WAL).
    pub async fn stop_immediate(&self) -> Result<(), chat::Error> {
        run(self.command("pg_ctl").arg("-D").arg(self.data()).args([
            "-w",
            "-m",
            "immediate",
            "stop",
        ]))
        .await
    }

    fn data(&self) -> PathBuf {
        self.dir.join("data")
    }

    fn command(&self, program: &str) -> std::process::Command {
        let program = self.bin.join(program);
        if self.as_postgres {
            let mut c = std::process::Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(program);
            c
        } else {
            std::process::Command::new(program)
        }
    }
}

impl Drop for PgCluster {
    fn drop(&mut self) {
        if self.data().join("postmaster.pid").exists() {
            let _ = self
                .command("pg_ctl")
                .arg("-D")
                .arg(self.data())
                .args(["-w", "-m", "immediate", "stop"])
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .status();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The newest `/usr/lib/postgresql/<version>/bin` with initdb.
fn bin_dir() -> Result<PathBuf, chat::Error> {
    let root = Path::new("/usr/lib/postgresql");
    let mut found: Vec<(u32, PathBuf)> = std::fs::read_dir(root)
        .map_err(|e| format!("{}: {e} (PostgreSQL server binaries)", root.display()))?
        .filter_map(|e| {
            let e = e.ok()?;
            let v: u32 = e.file_name().to_str()?.parse().ok()?;
            let bin = e.path().join("bin");
            bin.join("initdb").exists().then_some((v, bin))
        })
        .collect();
    found.sort();
    found
        .pop()
        .map(|(_, b)| b)
        .ok_or_else(|| format!("no initdb under {}/*/bin", root.display()).into())
}

/// Run to completion (bounded); an error carries its output.
async fn run(cmd: &mut std::process::Command) -> Result<(), chat::Error> {
    let what = format!("{cmd:?}");
    let mut cmd =
        tokio::process::Command::from(std::mem::replace(cmd, std::process::Command::new("true")));
    cmd.stdin(std::process::Stdio::null()).kill_on_drop(true);
    let out = tokio::time::timeout(Duration::from_secs(90), cmd.output())
        .await
        .map_err(|_| format!("{what} did not finish within 90 s"))??;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{what} failed ({}):\n{}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
        .into())
    }
}
