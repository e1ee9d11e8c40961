//! A PostgreSQL cluster of a test's own.

use crate::{free_port, suffix};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

/// A PostgreSQL cluster of a test's (or the chaos harness's) own, for what
/// the shared server must not undergo: a restart or `wal_level = logical`
/// (the `--notify logical` tests), an immediate stop (chaos's crash of
/// PostgreSQL). `initdb` into a temporary directory (Debian's
/// `/usr/lib/postgresql/<newest>/bin`, from the `postgresql` package
/// `./scripts/test.sh` installs), trust authentication on 127.0.0.1 only, a
/// free port. initdb refuses to run as root, so as root it runs as the
/// `postgres` OS user. Dropping it stops the server and removes the directory.
pub struct PgCluster {
    dir: PathBuf,
    bin: PathBuf,
    port: u16,
    as_postgres: bool,
}

/// What `start_logical` adds: logical decoding, and no durability (tests only).
const LOGICAL_CONF: &str =
    "wal_level = logical\nmax_wal_senders = 20\nmax_replication_slots = 20\n\
                            fsync = off\nfull_page_writes = off\n";

impl PgCluster {
    /// A durable cluster with default settings, started; `Err` with the
    /// command's output and the server log if anything fails (the cluster
    /// is removed again).
    pub async fn start() -> Result<Self, String> {
        Self::start_with("").await
    }

    /// A cluster with `wal_level = logical`, started. Panics with the
    /// server's log if anything fails.
    pub async fn start_logical() -> Self {
        Self::start_with(LOGICAL_CONF)
            .await
            .unwrap_or_else(|e| panic!("{e}"))
    }

    /// initdb, append `conf` to `postgresql.conf`, start, and wait until it
    /// accepts connections.
    pub async fn start_with(conf: &str) -> Result<Self, String> {
        let bin = postgres_bin_dir()?;
        let port = free_port();
        let dir = std::env::temp_dir().join(format!("postbox-pg-{port}-{}", suffix()));
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let as_postgres = running_as_root();
        // From here on, Drop cleans up.
        let c = PgCluster {
            dir,
            bin,
            port,
            as_postgres,
        };
        if as_postgres {
            c.run(Command::new("chown").arg("postgres:postgres").arg(&c.dir))
                .await?;
        }
        c.run(c.command("initdb").arg("-D").arg(c.data()).args([
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
        let conf = format!(
            "\n# postbox-testkit\nlisten_addresses = '127.0.0.1'\nport = {port}\nunix_socket_directories = '{}'\n\
             max_connections = 200\n{conf}",
            c.dir.display()
        );
        c.append_conf(&conf)?;
        c.up().await?;
        Ok(c)
    }

    /// `pg_ctl start`, returning once the server accepts connections (crash
    /// recovery included).
    pub async fn up(&self) -> Result<(), String> {
        self.run(
            self.command("pg_ctl")
                .arg("-D")
                .arg(self.data())
                .arg("-l")
                .arg(self.dir.join("log"))
                .args(["-w", "-t", "60", "start"]),
        )
        .await
    }

    /// `pg_ctl stop -m immediate`: every server process exits at once,
    /// without a checkpoint (a crash; the next start recovers from the WAL).
    pub async fn stop_immediate(&self) -> Result<(), String> {
        self.run(self.command("pg_ctl").arg("-D").arg(self.data()).args([
            "-w",
            "-m",
            "immediate",
            "stop",
        ]))
        .await
    }

    /// A streaming standby of this cluster (`pg_basebackup`, then
    /// `standby.signal`), started, with `application_name = 'standby'` so the
    /// primary can name it in `synchronous_standby_names`.
    pub async fn standby(&self) -> Result<PgCluster, String> {
        let port = free_port();
        let dir = std::env::temp_dir().join(format!("postbox-pg-{port}-{}", suffix()));
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let c = PgCluster {
            dir,
            bin: self.bin.clone(),
            port,
            as_postgres: self.as_postgres,
        };
        if c.as_postgres {
            c.run(Command::new("chown").arg("postgres:postgres").arg(&c.dir))
                .await?;
        }
        c.run(c.command("pg_basebackup").arg("-D").arg(c.data()).args([
            "-h",
            "127.0.0.1",
            "-p",
            &self.port.to_string(),
            "-U",
            "postgres",
            "-X",
            "stream",
            "--no-sync",
        ]))
        .await?;
        // Later lines win: the copied postgresql.conf names the primary's port.
        let conf = format!(
            "\n# postbox-testkit standby\nport = {port}\nunix_socket_directories = '{}'\n\
             primary_conninfo = 'host=127.0.0.1 port={} user=postgres application_name=standby'\n",
            c.dir.display(),
            self.port
        );
        c.append_conf(&conf)?;
        let signal = c.data().join("standby.signal");
        std::fs::write(&signal, "").map_err(|e| format!("{}: {e}", signal.display()))?;
        if c.as_postgres {
            c.run(Command::new("chown").arg("postgres:postgres").arg(&signal))
                .await?;
        }
        c.up().await?;
        Ok(c)
    }

    /// `pg_ctl promote`: a standby becomes a primary (returns once it is).
    pub async fn promote(&self) -> Result<(), String> {
        self.run(
            self.command("pg_ctl")
                .arg("-D")
                .arg(self.data())
                .args(["-w", "-t", "60", "promote"]),
        )
        .await
    }

    /// The superuser's URL (no password: trust on 127.0.0.1).
    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    /// Port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The server's log so far (for assertion messages).
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("log")).unwrap_or_default()
    }

    /// Append to `postgresql.conf` (later lines win).
    fn append_conf(&self, conf: &str) -> Result<(), String> {
        use std::io::Write;
        let path = self.data().join("postgresql.conf");
        std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .and_then(|mut f| f.write_all(conf.as_bytes()))
            .map_err(|e| format!("{}: {e}", path.display()))
    }

    fn data(&self) -> PathBuf {
        self.dir.join("data")
    }

    fn command(&self, program: &str) -> Command {
        let program = self.bin.join(program);
        if self.as_postgres {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(program);
            c
        } else {
            Command::new(program)
        }
    }

    /// Run to completion (bounded); `Err` with its output and the log.
    async fn run(&self, cmd: &mut Command) -> Result<(), String> {
        let what = format!("{cmd:?}");
        let mut cmd = tokio::process::Command::from(std::mem::replace(cmd, Command::new("true")));
        cmd.stdin(Stdio::null()).kill_on_drop(true);
        let out = tokio::time::timeout(Duration::from_secs(90), cmd.output())
            .await
            .map_err(|_| format!("{what} did not finish within 90 s"))?
            .map_err(|e| format!("{what}: {e}"))?;
        if out.status.success() {
            Ok(())
        } else {
            Err(format!(
                "{what} failed ({}):\n{}{}\n{}",
                out.status,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr),
                self.log()
            ))
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
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Whether this process runs as root (initdb must then run as `postgres`).
pub(crate) fn running_as_root() -> bool {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0)
}

/// The newest `/usr/lib/postgresql/<version>/bin` that has initdb.
fn postgres_bin_dir() -> Result<PathBuf, String> {
    let root = std::path::Path::new("/usr/lib/postgresql");
    let mut found: Vec<(u32, PathBuf)> = std::fs::read_dir(root)
        .map_err(|e| {
            format!(
                "{}: {e}: PostgreSQL's server binaries (initdb) are missing; \
                 ./scripts/test.sh installs Debian's postgresql package",
                root.display()
            )
        })?
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
        .ok_or_else(|| format!("no initdb under {}/*/bin", root.display()))
}
