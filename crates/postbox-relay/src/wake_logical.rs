//! `--notify logical`: wake the workers of schemas whose outbox is published
//! (`postbox migrate --notify logical`) by following the outbox's inserts
//! through logical decoding, instead of a NOTIFY from the producers' commits.
//!
//! One replication session per relay process, whatever the number of such
//! schemas: it creates a TEMPORARY logical slot (`pgoutput`, no snapshot) on
//! itself, so the server drops the slot when the session ends, for whatever
//! reason, and a dead relay never leaves a slot that retains WAL. It then
//! streams the schemas' publications. pgoutput sends only transactions that
//! inserted into a published outbox (PostgreSQL 15+ skips the others; older
//! servers send them empty, and an empty one wakes nobody): at each commit the
//! schemas whose outbox got an insert are woken, and the commit's end LSN is
//! reported as applied at once, so the slot never holds WAL back. Nothing is
//! read from the decoded rows: the workers claim from the table, as always.
//!
//! A wake-up lost while the session is down is made up for the same way as
//! the listener's: once streaming again, every logical schema's workers are
//! woken to rescan; meanwhile polling delivers. Errors name what to fix (the
//! REPLICATION attribute, wal_level, slot limits) and never show the password.

use crate::wake::WakeTx;
use crate::{Backoff, Config, Secret};
use pgwire_replication::{
    Lsn, PgWireError, ReplicationClient, ReplicationConfig, ReplicationEvent, TlsConfig,
};
use postbox::{sql::Queries, SchemaName};
use sqlx::{Connection, PgConnection};
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// Which of `schemas` have their outbox published for `--notify logical`.
pub(crate) async fn published(
    conn: &mut PgConnection,
    schemas: &[SchemaName],
) -> Result<Vec<SchemaName>, sqlx::Error> {
    let mut out = Vec::new();
    for schema in schemas {
        let yes: bool = sqlx::query_scalar(&Queries::new(schema).publication_exists)
            .bind(schema.as_str())
            .fetch_one(&mut *conn)
            .await?;
        if yes {
            out.push(schema.clone());
        }
    }
    Ok(out)
}

/// Follow the publications of `schemas` and bump their `wakers` until
/// `shutdown`; reconnect (with backoff) after any failure.
pub(crate) async fn follow(
    config: Arc<Config>,
    app_name: String,
    schemas: Vec<SchemaName>,
    wakers: HashMap<String, WakeTx>,
    shutdown: CancellationToken,
) {
    let target = match Target::parse(&config.database_url) {
        Ok(t) => t,
        Err(e) => {
            tracing::error!(url = %config.database_url, schemas = ?schemas, "logical wake-up off: {e}; the relay delivers by polling (every {})", humantime_serde::re::humantime::format_duration(config.poll_interval));
            return;
        }
    };
    let backoff = Backoff {
        base: Duration::from_millis(100),
        max: Duration::from_secs(5),
    };
    let mut failures = 0u32;
    let mut schemas = schemas;
    while !shutdown.is_cancelled() {
        let mut session = Session {
            config: &config,
            target: &target,
            app_name: &app_name,
            wakers: &wakers,
            shutdown: &shutdown,
            streaming: false,
        };
        let result = session.run(&mut schemas).await;
        if session.streaming {
            failures = 0;
        }
        let delay = match result {
            Ok(Ended::Shutdown) => return,
            Ok(Ended::NothingPublished) => {
                tracing::info!("no schema of this relay is published for logical wake-up any more (its policy changed); logical wake-up stops, NOTIFY and polling remain");
                return;
            }
            Err(e) => {
                let (message, lasting) = explain(&e, &target.user, &config);
                if lasting {
                    tracing::error!(schemas = ?schemas, "{message}");
                } else {
                    tracing::warn!(schemas = ?schemas, error = %message, "logical wake-up stream failed; polling meanwhile, reconnecting");
                }
                // A setting an operator must change: look again now and then,
                // without filling the log.
                if lasting {
                    Duration::from_secs(30)
                } else {
                    backoff.delay(failures)
                }
            }
        };
        failures = failures.saturating_add(1);
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(delay) => {}
        }
    }
}

/// Why a session ended without an error.
enum Ended {
    Shutdown,
    NothingPublished,
}

/// Why a session failed.
#[derive(Debug)]
enum Failure {
    /// The relay's role may not open a replication session.
    NoReplicationAttribute,
    /// The server cannot decode (someone lowered wal_level after migrating).
    WalLevel(String),
    Sql(sqlx::Error),
    Stream(PgWireError),
    Ended,
}

/// The message to log for `e`, and whether an operator must act (as opposed
/// to a passing network or server failure).
fn explain(e: &Failure, user: &str, config: &Config) -> (String, bool) {
    let poll = humantime_serde::re::humantime::format_duration(config.poll_interval);
    let grant = format!(
        "the relay's role {user:?} lacks the REPLICATION attribute, which `--notify logical` needs for its replication session: run `ALTER ROLE {user} REPLICATION` as a superuser (and allow it in pg_hba.conf like its other connections); until then the relay delivers by polling (every {poll})"
    );
    match e {
        Failure::NoReplicationAttribute => (grant, true),
        Failure::WalLevel(found) => (
            format!("`--notify logical` needs wal_level = logical, but the server now has wal_level = {found}: run `ALTER SYSTEM SET wal_level = logical` as a superuser and restart PostgreSQL; until then the relay delivers by polling (every {poll})"),
            true,
        ),
        Failure::Sql(e) => (format!("database error: {e}"), false),
        Failure::Ended => ("the server ended the replication stream".into(), false),
        Failure::Stream(e) => {
            let text = e.to_string();
            if text.contains("SQLSTATE 42501") {
                (grant, true)
            } else if text.contains("SQLSTATE 53400") {
                (format!("{text}: every replication slot or WAL sender is in use; raise max_replication_slots / max_wal_senders (each relay process with `--notify logical` uses one of each); polling (every {poll}) delivers meanwhile"), true)
            } else if text.contains("unsupported auth method code: 5") {
                (format!("the server asks for md5 password authentication, which the logical wake-up does not speak: use scram-sha-256 for the relay's role (password_encryption = scram-sha-256, set its password again, and scram-sha-256 in pg_hba.conf); polling (every {poll}) delivers meanwhile"), true)
            } else {
                (text, false)
            }
        }
    }
}

impl From<sqlx::Error> for Failure {
    fn from(e: sqlx::Error) -> Self {
        Failure::Sql(e)
    }
}
impl From<PgWireError> for Failure {
    fn from(e: PgWireError) -> Self {
        Failure::Stream(e)
    }
}

struct Session<'a> {
    config: &'a Config,
    target: &'a Target,
    app_name: &'a str,
    wakers: &'a HashMap<String, WakeTx>,
    shutdown: &'a CancellationToken,
    /// The server accepted START_REPLICATION in this session.
    streaming: bool,
}

impl Session<'_> {
    /// Check, connect, create the slot, stream. Returns on shutdown or failure.
    async fn run(&mut self, schemas: &mut Vec<SchemaName>) -> Result<Ended, Failure> {
        // Each time: a policy may have changed, and the reason a previous
        // attempt failed may have been fixed.
        let checked = tokio::select! {
            _ = self.shutdown.cancelled() => return Ok(Ended::Shutdown),
            c = self.check(schemas) => c?,
        };
        *schemas = checked;
        if schemas.is_empty() {
            return Ok(Ended::NothingPublished);
        }
        let slot = format!(
            "postbox_relay_{}_{}",
            std::process::id(),
            &uuid::Uuid::new_v4().simple().to_string()[..8]
        );
        let publications: Vec<String> = schemas
            .iter()
            .map(postbox::migrate::publication_name)
            .collect();
        let cfg = self
            .target
            .replication_config(&slot, publications)
            .with_application_name(self.app_name)
            // Applied positions reach the server within a second.
            .with_status_interval(Duration::from_secs(1))
            .with_buffer_size(1024);
        let mut client = ReplicationClient::connect_gated(cfg).await?;
        let result = self.stream(&mut client, &slot, schemas).await;
        match result {
            Ok(Ended::Shutdown) => {
                // CopyDone, then the server ends the session (and drops the slot).
                client.stop();
                if tokio::time::timeout(Duration::from_secs(2), client.shutdown())
                    .await
                    .is_err()
                {
                    client.abort();
                }
            }
            _ => client.abort(),
        }
        result
    }

    /// Which schemas are (still) published; the role and wal_level can stream.
    async fn check(&self, schemas: &[SchemaName]) -> Result<Vec<SchemaName>, Failure> {
        let opts: sqlx::postgres::PgConnectOptions = self.config.database_url.expose().parse()?;
        let mut conn = PgConnection::connect_with(&opts.application_name(self.app_name)).await?;
        let still = published(&mut conn, schemas).await?;
        let may: bool = sqlx::query_scalar(
            "SELECT rolreplication OR rolsuper FROM pg_catalog.pg_roles WHERE rolname = current_user",
        )
        .fetch_one(&mut conn)
        .await?;
        let wal_level: String = sqlx::query_scalar("SELECT current_setting('wal_level')")
            .fetch_one(&mut conn)
            .await?;
        let _ = conn.close().await;
        if still.is_empty() {
            return Ok(still);
        }
        if !may {
            return Err(Failure::NoReplicationAttribute);
        }
        if wal_level != "logical" {
            return Err(Failure::WalLevel(wal_level));
        }
        Ok(still)
    }

    async fn stream(
        &mut self,
        client: &mut ReplicationClient,
        slot: &str,
        schemas: &[SchemaName],
    ) -> Result<Ended, Failure> {
        let start = async {
            // On this very session, before START_REPLICATION: a temporary
            // slot lives exactly as long as the session.
            client
                .simple_query(&format!(
                    "CREATE_REPLICATION_SLOT {slot} TEMPORARY LOGICAL pgoutput (SNAPSHOT 'nothing')"
                ))
                .await?;
            client.start().await?;
            client.wait_started().await
        };
        tokio::select! {
            _ = self.shutdown.cancelled() => return Ok(Ended::Shutdown),
            r = start => r?,
        }
        self.streaming = true;
        tracing::info!(slot, schemas = ?schemas, "logical wake-up streaming");
        // Rows committed while no session streamed (before the first, or
        // between two) must not wait for the poll.
        for s in schemas {
            if let Some(tx) = self.wakers.get(s.as_str()) {
                crate::wake::bump(tx);
            }
        }
        let mut decoder = Decoder::default();
        let mut recheck = Recheck::default();
        loop {
            let event = tokio::select! {
                _ = self.shutdown.cancelled() => return Ok(Ended::Shutdown),
                names = recheck.due() => {
                    self.bump(names.iter().map(String::as_str));
                    continue;
                }
                e = client.recv() => e?,
            };
            let Some(event) = event else {
                return Err(Failure::Ended);
            };
            match event {
                ReplicationEvent::Begin { .. } => decoder.begin(),
                ReplicationEvent::XLogData { data, .. } => decoder.change(&data),
                ReplicationEvent::Commit { end_lsn, .. } => {
                    let names = match decoder.commit() {
                        Touched::Schemas(names) => names,
                        Touched::Unknown => self.wakers.keys().cloned().collect(),
                    };
                    self.bump(names.iter().map(String::as_str));
                    recheck.add(names);
                    client.update_applied_lsn(end_lsn);
                }
                // Between transactions everything up to the server's
                // position has been seen: let the slot move on.
                ReplicationEvent::KeepAlive { wal_end, .. }
                    if !decoder.in_transaction() && wal_end > Lsn::ZERO =>
                {
                    client.update_applied_lsn(wal_end);
                }
                _ => {}
            }
        }
    }

    fn bump<'n>(&self, names: impl Iterator<Item = &'n str>) {
        for name in names {
            if let Some(tx) = self.wakers.get(name) {
                crate::wake::bump(tx);
            }
        }
    }
}

/// Wake-ups repeated shortly after a commit. The commit record reaches the
/// WAL sender once it is flushed, which is a moment *before* the committing
/// backend makes the transaction visible to other sessions' snapshots: a
/// worker woken at once can claim before the row is visible, find nothing
/// and sleep until the poll. So every woken schema is woken again 10 ms and
/// 100 ms later (a NOTIFY has no such gap: it is sent after visibility). At
/// most 110 extra wake-ups a second per schema while commits flow; each costs
/// an idle worker one claim.
#[derive(Default)]
struct Recheck {
    stages: [(Option<tokio::time::Instant>, HashSet<String>); 2],
}

impl Recheck {
    const DELAYS: [Duration; 2] = [Duration::from_millis(10), Duration::from_millis(100)];

    fn add(&mut self, names: Vec<String>) {
        if names.is_empty() {
            return;
        }
        let now = tokio::time::Instant::now();
        for ((deadline, pending), delay) in self.stages.iter_mut().zip(Self::DELAYS) {
            pending.extend(names.iter().cloned());
            deadline.get_or_insert(now + delay);
        }
    }

    /// The schemas of the earliest stage, once it is due (pending forever
    /// while nothing waits).
    async fn due(&mut self) -> Vec<String> {
        let next = self
            .stages
            .iter_mut()
            .filter(|(d, _)| d.is_some())
            .min_by_key(|(d, _)| *d);
        match next {
            Some((deadline, pending)) => {
                tokio::time::sleep_until(deadline.expect("filtered")).await;
                *deadline = None;
                pending.drain().collect()
            }
            None => std::future::pending().await,
        }
    }
}

/// Which schemas a decoded transaction inserted into.
#[derive(Debug, PartialEq, Eq)]
enum Touched {
    Schemas(Vec<String>),
    /// An insert into a relation whose description was not seen (never
    /// expected): wake every logical schema rather than guess.
    Unknown,
}

/// Just enough of pgoutput (protocol version 1): Relation messages, to map a
/// relation id to its schema, and Insert messages, to see which relations a
/// transaction inserted into.
#[derive(Default)]
struct Decoder {
    relations: HashMap<u32, String>,
    touched: HashSet<String>,
    unknown: bool,
    open: bool,
}

impl Decoder {
    fn begin(&mut self) {
        self.touched.clear();
        self.unknown = false;
        self.open = true;
    }

    fn in_transaction(&self) -> bool {
        self.open
    }

    fn change(&mut self, data: &[u8]) {
        match data.first() {
            // Relation: 'R', oid u32, namespace\0, name\0, ...
            Some(b'R') => {
                if let Some(oid) = oid(data) {
                    if let Some(ns) = data[5..].split(|b| *b == 0).next() {
                        self.relations
                            .insert(oid, String::from_utf8_lossy(ns).into_owned());
                    }
                }
            }
            // Insert: 'I', oid u32, 'N', tuple
            Some(b'I') => match oid(data).and_then(|o| self.relations.get(&o)) {
                Some(ns) => {
                    self.touched.insert(ns.clone());
                }
                None => self.unknown = true,
            },
            _ => {}
        }
    }

    fn commit(&mut self) -> Touched {
        self.open = false;
        if self.unknown {
            self.unknown = false;
            self.touched.clear();
            return Touched::Unknown;
        }
        let mut names: Vec<String> = self.touched.drain().collect();
        names.sort();
        Touched::Schemas(names)
    }
}

fn oid(data: &[u8]) -> Option<u32> {
    Some(u32::from_be_bytes(data.get(1..5)?.try_into().ok()?))
}

/// Where the replication session goes: the relay's database URL, read the
/// way the relay's other sessions read it (sqlx: host, port, socket, user,
/// database, sslmode, with the PG* environment defaults), plus the password.
///
/// The session is plain TCP (see the workspace Cargo.toml on why the
/// replication client is built without TLS): a URL whose sslmode demands TLS
/// (`require`, `verify-ca`, `verify-full`) is refused with that reason, and
/// `prefer`/`allow` (sqlx's default is `prefer`) connect without it. What
/// crosses it: authentication (SCRAM never sends the password) and the ids of
/// new outbox rows, as the publication lists that column alone.
#[derive(Debug)]
struct Target {
    host: String,
    port: u16,
    user: String,
    password: Password,
    database: String,
}

/// Shown as `***` by `Debug`.
struct Password(String);

impl std::fmt::Debug for Password {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("***")
    }
}

impl Target {
    fn parse(url: &Secret) -> Result<Target, String> {
        let opts: sqlx::postgres::PgConnectOptions = url
            .expose()
            .parse()
            .map_err(|e| format!("invalid database URL: {e}"))?;
        use sqlx::postgres::PgSslMode;
        if let mode @ (PgSslMode::Require | PgSslMode::VerifyCa | PgSslMode::VerifyFull) =
            opts.get_ssl_mode()
        {
            return Err(format!(
                "the database URL asks for TLS (sslmode={}), and the logical wake-up's replication session has no TLS in this build; use a NOTIFY policy (`postbox migrate --notify adaptive`) for this database, or sslmode=prefer if the network to it is trusted (the session carries outbox ids only)",
                match mode {
                    PgSslMode::Require => "require",
                    PgSslMode::VerifyCa => "verify-ca",
                    _ => "verify-full",
                }
            ));
        }
        let parsed =
            url::Url::parse(url.expose()).map_err(|e| format!("invalid database URL: {e}"))?;
        let query: HashMap<String, String> = parsed.query_pairs().into_owned().collect();
        // userinfo is percent-encoded; form decoding reads '+' as a space, so
        // protect it first.
        let decode = |s: &str| {
            url::form_urlencoded::parse(format!("x={}", s.replace('+', "%2B")).as_bytes())
                .next()
                .map(|(_, v)| v.into_owned())
                .unwrap_or_default()
        };
        let password = query
            .get("password")
            .cloned()
            .or_else(|| parsed.password().map(decode))
            .or_else(|| std::env::var("PGPASSWORD").ok())
            .unwrap_or_default();
        let host = match opts.get_socket() {
            Some(dir) => dir.to_string_lossy().into_owned(),
            None => opts.get_host().to_owned(),
        };
        let user = opts.get_username().to_owned();
        Ok(Target {
            database: opts.get_database().unwrap_or(&user).to_owned(),
            host,
            port: opts.get_port(),
            user,
            password: Password(password),
        })
    }

    /// Never log the result: its `Debug` shows the password.
    fn replication_config(&self, slot: &str, publications: Vec<String>) -> ReplicationConfig {
        ReplicationConfig::new(
            self.host.clone(),
            self.user.clone(),
            self.password.0.clone(),
            self.database.clone(),
            slot,
            publications,
        )
        .with_port(self.port)
        .with_tls(TlsConfig::disabled())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn relation(oid: u32, ns: &str, name: &str) -> Vec<u8> {
        let mut m = vec![b'R'];
        m.extend(oid.to_be_bytes());
        m.extend(ns.as_bytes());
        m.push(0);
        m.extend(name.as_bytes());
        m.extend([0, b'd', 0, 0]);
        m
    }

    fn insert(oid: u32) -> Vec<u8> {
        let mut m = vec![b'I'];
        m.extend(oid.to_be_bytes());
        m.extend([b'N', 0, 0]);
        m
    }

    #[test]
    fn wakes_only_the_schemas_a_transaction_inserted_into() {
        let mut d = Decoder::default();
        d.begin();
        d.change(&relation(10, "shop", "outbox"));
        d.change(&insert(10));
        d.change(&insert(10));
        assert!(d.in_transaction());
        assert_eq!(d.commit(), Touched::Schemas(vec!["shop".into()]));
        assert!(!d.in_transaction());
        // The relation is known from now on; a second schema joins.
        d.begin();
        d.change(&insert(10));
        d.change(&relation(11, "billing", "outbox"));
        d.change(&insert(11));
        assert_eq!(
            d.commit(),
            Touched::Schemas(vec!["billing".into(), "shop".into()])
        );
        // A transaction with no insert (e.g. a logical message) wakes nobody.
        d.begin();
        assert_eq!(d.commit(), Touched::Schemas(vec![]));
        // An insert into an unseen relation wakes everyone.
        d.begin();
        d.change(&insert(99));
        assert_eq!(d.commit(), Touched::Unknown);
        // Truncated messages are ignored, not a panic.
        d.begin();
        d.change(b"I\x00");
        d.change(b"R");
        assert_eq!(d.commit(), Touched::Unknown);
    }

    #[test]
    fn reads_the_url_like_the_other_sessions() {
        let t = Target::parse(&Secret::new(
            "postgres://relay:p%40ss+1@db.example:6543/app?sslmode=prefer",
        ))
        .unwrap();
        assert_eq!(
            (
                t.host.as_str(),
                t.port,
                t.user.as_str(),
                t.password.0.as_str(),
                t.database.as_str()
            ),
            ("db.example", 6543, "relay", "p@ss+1", "app")
        );
        assert!(!format!("{t:?}").contains("p@ss"));
        let t = Target::parse(&Secret::new(
            "postgres://u@127.0.0.1/db?sslmode=disable&password=x",
        ))
        .unwrap();
        assert_eq!((t.password.0.as_str(), t.port), ("x", 5432));
        let t = Target::parse(&Secret::new("postgres://u@h:1/?host=/run/pg")).unwrap();
        assert_eq!((t.host.as_str(), t.database.as_str()), ("/run/pg", "u"));
        for mode in ["require", "verify-ca", "verify-full"] {
            let e = Target::parse(&Secret::new(format!(
                "postgres://u:canary-pw@h/db?sslmode={mode}"
            )))
            .unwrap_err();
            assert!(
                e.contains(&format!("sslmode={mode}")) && e.contains("no TLS"),
                "{e}"
            );
            assert!(!e.contains("canary-pw"));
        }
    }

    #[test]
    fn errors_say_what_to_grant_and_never_the_password() {
        let config = Config {
            database_url: Secret::new("postgres://relay:canary-pw@h/db"),
            ..Config::default()
        };
        let (m, lasting) = explain(
            &Failure::Stream(PgWireError::Server(
                "must be superuser or replication role to start walsender (SQLSTATE 42501)".into(),
            )),
            "relay",
            &config,
        );
        assert!(lasting);
        assert!(m.contains("ALTER ROLE relay REPLICATION"), "{m}");
        assert!(!m.contains("canary-pw"));
        let (m, _) = explain(&Failure::WalLevel("replica".into()), "relay", &config);
        assert!(m.contains("wal_level = logical"), "{m}");
    }
}
