//! Shared test support: connection URLs, per-test schemas and queue names,
//! throwaway `redis-server` instances, and waiting on conditions instead of sleeping.

use std::future::Future;
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// PostgreSQL URL for tests: `DATABASE_URL`, else the local server.
pub fn database_url() -> String {
    std::env::var("DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres:postgres@127.0.0.1:5432/postgres".into())
}

/// Redis URL for tests that do not stop Redis: `REDIS_URL`, else the local server.
pub fn redis_url() -> String {
    std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into())
}

/// A short random lower-case suffix.
pub fn suffix() -> String {
    uuid::Uuid::new_v4().simple().to_string()[..10].to_owned()
}

/// A schema name no other test uses.
pub fn unique_schema(prefix: &str) -> String {
    format!("t_{prefix}_{}", suffix())
}

/// A pool on the test database.
pub async fn pool() -> sqlx::PgPool {
    sqlx::postgres::PgPoolOptions::new()
        .max_connections(8)
        .acquire_timeout(Duration::from_secs(30))
        .connect(&database_url())
        .await
        .unwrap_or_else(|e| panic!("cannot connect to test PostgreSQL at DATABASE_URL: {e}"))
}

/// Drop a test schema and everything in it.
pub async fn drop_schema(pool: &sqlx::PgPool, schema: &str) {
    let _ = sqlx::raw_sql(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE"))
        .execute(pool)
        .await;
}

/// Poll `cond` every 20 ms until it returns true; panic with `what` after `timeout`.
pub async fn wait_until<F, Fut>(timeout: Duration, what: &str, mut cond: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if cond().await {
            return;
        }
        if Instant::now() > deadline {
            panic!("timed out after {timeout:?} waiting for: {what}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A free TCP port on loopback (racy by nature, good enough for tests).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("no free port")
}

/// A test-owned `redis-server` with `appendonly yes` on a free port, so a
/// test can stop, kill and restart it without touching the shared Redis.
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

/// A test-owned Kafka-protocol broker (tansu, memory storage) on a free port.
/// `POSTBOX_TANSU_BIN` names the binary (`./scripts/test.sh` installs it).
pub struct KafkaBroker {
    port: u16,
    child: Option<Child>,
    tls: Option<TlsFront>,
}

/// A TLS terminator (socat) in front of the broker: tansu 0.6 speaks plain
/// TCP only, so clients reach it through this to prove their TLS settings.
struct TlsFront {
    port: u16,
    dir: std::path::PathBuf,
    child: Child,
}

/// Write a fresh self-signed certificate for 127.0.0.1 (`cert.pem`, which is
/// also its own CA, and `key.pem`) into `dir`.
pub fn self_signed_cert(dir: &std::path::Path) {
    std::fs::create_dir_all(dir).unwrap();
    let out = Command::new("openssl")
        .args([
            "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
        ])
        .args([
            "-subj",
            "/CN=127.0.0.1",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
        ])
        .arg("-keyout")
        .arg(dir.join("key.pem"))
        .arg("-out")
        .arg(dir.join("cert.pem"))
        .output()
        .expect("run openssl (./scripts/test.sh installs it)");
    assert!(
        out.status.success(),
        "openssl req: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

impl Drop for TlsFront {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl KafkaBroker {
    fn bin() -> String {
        std::env::var("POSTBOX_TANSU_BIN").unwrap_or_else(|_| {
            panic!("POSTBOX_TANSU_BIN is not set: run the tests through ./scripts/test.sh, which installs the broker (tests/python/requirements.txt)")
        })
    }

    /// Start one and wait until it accepts connections.
    pub async fn start() -> Self {
        let mut b = KafkaBroker {
            port: free_port(),
            child: None,
            tls: None,
        };
        b.restart().await;
        b
    }

    /// Start one reachable only through TLS: a fresh self-signed certificate
    /// for 127.0.0.1 ([`KafkaBroker::tls_ca`]) served by a socat terminator on
    /// [`KafkaBroker::bootstrap`], which the broker advertises.
    pub async fn start_tls() -> Self {
        let dir = std::env::temp_dir().join(format!("postbox-kafka-tls-{}", suffix()));
        self_signed_cert(&dir);
        let (port, tls_port) = (free_port(), free_port());
        let child = Command::new("socat")
            .arg(format!(
                "OPENSSL-LISTEN:{tls_port},bind=127.0.0.1,reuseaddr,fork,verify=0,cert={},key={}",
                dir.join("cert.pem").display(),
                dir.join("key.pem").display()
            ))
            .arg(format!("TCP:127.0.0.1:{port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("run socat (./scripts/test.sh installs it)");
        let mut b = KafkaBroker {
            port,
            child: None,
            tls: Some(TlsFront {
                port: tls_port,
                dir,
                child,
            }),
        };
        b.restart().await;
        wait_until(
            Duration::from_secs(10),
            "the TLS front to listen",
            || async move {
                tokio::net::TcpStream::connect(("127.0.0.1", tls_port))
                    .await
                    .is_ok()
            },
        )
        .await;
        b
    }

    /// The CA file (the self-signed certificate) of a [`KafkaBroker::start_tls`] broker.
    pub fn tls_ca(&self) -> std::path::PathBuf {
        self.tls
            .as_ref()
            .expect("not a TLS broker")
            .dir
            .join("cert.pem")
    }

    /// `127.0.0.1:<port>`: where clients connect (the TLS front, if any).
    pub fn bootstrap(&self) -> String {
        format!(
            "127.0.0.1:{}",
            self.tls.as_ref().map_or(self.port, |t| t.port)
        )
    }

    /// (Re)start on the same port. Storage is in memory: topics must be created again.
    pub async fn restart(&mut self) {
        assert!(self.child.is_none(), "broker already running");
        let url = format!("tcp://127.0.0.1:{}", self.port);
        let advertised = format!("tcp://{}", self.bootstrap());
        let child = Command::new(Self::bin())
            .args([
                "broker",
                "--listener-url",
                &url,
                "--advertised-listener-url",
                &advertised,
                "--storage-engine",
                "memory://tansu/",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("cannot start the tansu broker");
        self.child = Some(child);
        let port = self.port;
        wait_until(
            Duration::from_secs(20),
            "the Kafka broker to listen",
            || async move {
                tokio::net::TcpStream::connect(("127.0.0.1", port))
                    .await
                    .is_ok()
            },
        )
        .await;
    }

    /// Create a topic with `partitions` partitions.
    pub fn create_topic(&self, name: &str, partitions: u32) {
        let out = Command::new(Self::bin())
            .args([
                "topic",
                "create",
                name,
                "--partitions",
                &partitions.to_string(),
                "--broker",
                &format!("tcp://127.0.0.1:{}", self.port),
            ])
            .output()
            .expect("tansu topic create");
        assert!(
            out.status.success(),
            "creating topic {name}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// SIGKILL the broker (its memory storage goes with it).
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for KafkaBroker {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Read `count` messages of `topic` with the independent Python client
/// (confluent-kafka); one JSON object per message.
pub async fn kafka_consume_independent(
    bootstrap: &str,
    topic: &str,
    count: usize,
    timeout_s: u32,
) -> Vec<serde_json::Value> {
    let python = std::env::var("POSTBOX_TEST_PYTHON").unwrap_or_else(|_| {
        panic!("POSTBOX_TEST_PYTHON is not set: run the tests through ./scripts/test.sh")
    });
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../../tests/python/consume.py");
    let out = tokio::process::Command::new(python)
        .args([
            script,
            bootstrap,
            topic,
            &count.to_string(),
            &timeout_s.to_string(),
        ])
        .output()
        .await
        .expect("run consume.py");
    assert!(
        out.status.success(),
        "independent consumer failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("consume.py prints JSON lines"))
        .collect()
}

/// A plain HTTP/1.1 GET on loopback: (status, body). Err if nothing listens.
pub async fn http_get(url: &str) -> std::io::Result<(u16, String)> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let rest = url.strip_prefix("http://").expect("http:// URL");
    let (host, path) = rest
        .split_once('/')
        .map_or((rest, "/".to_owned()), |(h, p)| (h, format!("/{p}")));
    let mut s = tokio::net::TcpStream::connect(host).await?;
    s.write_all(
        format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n").as_bytes(),
    )
    .await?;
    let mut buf = Vec::new();
    s.read_to_end(&mut buf).await?;
    let text = String::from_utf8_lossy(&buf).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    Ok((status, body.to_owned()))
}

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
        use std::io::Write;
        let path = c.data().join("postgresql.conf");
        std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .and_then(|mut f| f.write_all(conf.as_bytes()))
            .map_err(|e| format!("{}: {e}", path.display()))?;
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
fn running_as_root() -> bool {
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
