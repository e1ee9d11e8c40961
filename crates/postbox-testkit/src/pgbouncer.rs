//! A PgBouncer of a test's own, in front of the test database.

use crate::{free_port, suffix, wait_until};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// Debian's `pgbouncer` on a free port in **transaction** pooling mode (or session mode, [`PgBouncer::start_session`]; a
/// server connection belongs to a client only for one transaction, as on
/// most hosted PostgreSQL), in front of the server of `DATABASE_URL`, with a
/// small pool so that clients share server connections. Trust
/// authentication for `postgres`, `root` and the users given (it logs in to
/// the server with the password of `DATABASE_URL`'s user); PgBouncer refuses
/// to run as root, so it runs as `postgres`.
pub struct PgBouncer {
    port: u16,
    dir: PathBuf,
    child: Option<Child>,
}

impl PgBouncer {
    /// Start one that lets `users` (beside `postgres` and `root`) in, and wait
    /// until it accepts connections.
    pub async fn start(users: &[&str]) -> Self {
        Self::start_in(server(), "transaction", 4, &trusted(users)).await
    }

    /// One in `mode` (`transaction` or `session`) with `pool` server sessions
    /// per user, in front of the server of `server_url` (not necessarily
    /// `DATABASE_URL`'s), letting in `users` given as `(name, password)`:
    /// the password is the one it logs in to the server with.
    pub async fn start_for(
        server_url: &str,
        mode: &str,
        pool: u32,
        users: &[(&str, &str)],
    ) -> Self {
        let server = url::Url::parse(server_url).expect("server URL is a URL");
        let users: Vec<(String, String)> = users
            .iter()
            .map(|(u, p)| (u.to_string(), p.to_string()))
            .collect();
        Self::start_in(server, mode, pool, &users).await
    }

    /// [`start`](Self::start) in **session** pooling mode (a client keeps its
    /// server connection until it leaves), with room for a relay's sessions;
    /// [`pool_mode`](Self::pool_mode) switches it later.
    pub async fn start_session(users: &[&str]) -> Self {
        Self::start_in(server(), "session", 16, &trusted(users)).await
    }

    /// Switch the pooling mode while it runs (the file rewritten, then
    /// SIGHUP, as an operator reloads it): clients already connected get the
    /// new mode at their next transaction. Servers are handed out in turn
    /// (`server_round_robin`), so in transaction mode a client's next
    /// transaction lands on another server session.
    pub fn pool_mode(&self, mode: &str) {
        let ini = self.dir.join("pgbouncer.ini");
        let text = std::fs::read_to_string(&ini).unwrap();
        let text: String = text
            .lines()
            .map(|l| {
                if l.starts_with("pool_mode = ") {
                    format!("pool_mode = {mode}\n")
                } else {
                    format!("{l}\n")
                }
            })
            .collect();
        std::fs::write(&ini, text).unwrap();
        let pid = self.child.as_ref().expect("pgbouncer running").id();
        let ok = Command::new("kill")
            .args(["-HUP", &pid.to_string()])
            .status()
            .map(|s| s.success())
            .unwrap_or(false);
        assert!(ok, "cannot send SIGHUP to pgbouncer (pid {pid})");
    }

    async fn start_in(server: url::Url, mode: &str, pool: u32, users: &[(String, String)]) -> Self {
        let port = free_port();
        let dir = std::env::temp_dir().join(format!("postbox-pgbouncer-{port}-{}", suffix()));
        std::fs::create_dir_all(&dir).unwrap();
        let (host, server_port) = (
            server.host_str().unwrap_or("127.0.0.1").to_string(),
            server.port().unwrap_or(5432),
        );
        std::fs::write(
            dir.join("pgbouncer.ini"),
            format!(
                "[databases]\n* = host={host} port={server_port}\n\
                 [pgbouncer]\nlisten_addr = 127.0.0.1\nlisten_port = {port}\n\
                 unix_socket_dir =\nauth_type = trust\nauth_file = {users}\n\
                 pool_mode = {mode}\ndefault_pool_size = {pool}\nserver_round_robin = 1\n\
                 max_client_conn = 500\n\
                 ignore_startup_parameters = extra_float_digits\n\
                 logfile = {log}\n",
                users = dir.join("users.txt").display(),
                log = dir.join("pgbouncer.log").display(),
            ),
        )
        .unwrap();
        let list: String = users
            .iter()
            .map(|(u, p)| format!("\"{u}\" \"{p}\"\n"))
            .collect();
        std::fs::write(dir.join("users.txt"), list).unwrap();
        // Readable, and its log writable, by the user it runs as.
        Command::new("chmod")
            .args(["-R", "a+rwX"])
            .arg(&dir)
            .status()
            .expect("chmod");
        let mut s = PgBouncer {
            port,
            dir,
            child: None,
        };
        s.restart().await;
        s
    }

    /// The port it listens on (127.0.0.1).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `postgres://postgres@127.0.0.1:<port>/<database of DATABASE_URL>`.
    pub fn url(&self) -> String {
        self.url_as("postgres")
    }

    /// The URL through this pooler as `user` (trusted, no password).
    pub fn url_as(&self, user: &str) -> String {
        let server = server();
        let db = server.path().trim_start_matches('/');
        let db = if db.is_empty() { "postgres" } else { db };
        format!("postgres://{user}@127.0.0.1:{}/{db}", self.port)
    }

    /// (Re)start on the same port, with empty pools.
    pub async fn restart(&mut self) {
        assert!(self.child.is_none(), "pgbouncer already running");
        let user: &[&str] = if crate::postgres::running_as_root() {
            &["-u", "postgres"]
        } else {
            &[]
        };
        let bin = ["/usr/sbin/pgbouncer", "/usr/bin/pgbouncer"]
            .into_iter()
            .find(|p| std::path::Path::new(p).exists())
            .unwrap_or("pgbouncer");
        let child = Command::new(bin)
            .args(user)
            .arg(self.dir.join("pgbouncer.ini"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| {
                panic!("cannot start {bin}: {e} (./scripts/test.sh installs Debian's pgbouncer)")
            });
        self.child = Some(child);
        let port = self.port;
        wait_until(
            Duration::from_secs(10),
            "pgbouncer to listen",
            || async move {
                tokio::net::TcpStream::connect(("127.0.0.1", port))
                    .await
                    .is_ok()
            },
        )
        .await;
    }

    /// Kill it (every client connection breaks, every server connection is closed).
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Its log, for a failing test's message.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("pgbouncer.log")).unwrap_or_default()
    }
}

/// `postgres`, `root` and `users`, trusted; the password of DATABASE_URL's
/// user (a fresh machine's server asks for one over TCP) is the one PgBouncer
/// logs in to the server with.
fn trusted(users: &[&str]) -> Vec<(String, String)> {
    let server = server();
    ["postgres", "root"]
        .iter()
        .chain(users)
        .map(|u| {
            let password = if *u == server.username() {
                server.password().unwrap_or("").to_string()
            } else {
                String::new()
            };
            (u.to_string(), password)
        })
        .collect()
}

fn server() -> url::Url {
    url::Url::parse(&crate::database_url()).expect("DATABASE_URL is a URL")
}

impl Drop for PgBouncer {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
