//! One or several PostgreSQL servers behind one URL, as libpq reads it:
//! `postgres://user:pw@primary:5432,standby:5432/db?target_session_attrs=read-write`.
//!
//! sqlx connects to one host only, so failover (a standby promoted when the
//! primary dies) needs the host list handled here: each new session tries the
//! server that last worked first, then the others in order, and with
//! `target_session_attrs=read-write` (or `primary`) skips a server whose
//! sessions are read-only (a standby, or a primary made read-only). Sessions
//! already open stay where they are; they fail when their server dies and
//! their owner reconnects through here.

use sqlx::postgres::{PgConnectOptions, PgPool};
use sqlx::{ConnectOptions, Connection, PgConnection};
use std::str::FromStr;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::time::Duration;

/// A server list parsed from a URL. Cheap to share behind an `Arc`.
#[derive(Debug)]
pub struct Servers {
    hosts: Vec<PgConnectOptions>,
    read_write: bool,
    /// Index of the server that last accepted a session.
    preferred: AtomicUsize,
}

/// Why a URL cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ServersError {
    /// Not a PostgreSQL URL, or a host of its list is malformed.
    #[error("bad PostgreSQL URL: {0}")]
    Url(String),
    /// A `target_session_attrs` value postbox does not support.
    #[error("target_session_attrs={0} is not supported: use read-write (or primary) to follow the primary, or any")]
    SessionAttrs(String),
}

/// Every server of the list refused, failed, or was read-only.
fn none_writable(tried: &[String]) -> sqlx::Error {
    sqlx::Error::Io(std::io::Error::new(
        std::io::ErrorKind::NotConnected,
        format!(
            "no PostgreSQL server of the URL accepts writes ({}); is a primary up, or a standby being promoted?",
            tried.join("; ")
        ),
    ))
}

impl FromStr for Servers {
    type Err = ServersError;

    fn from_str(url: &str) -> Result<Self, ServersError> {
        let bad = |why: &str| ServersError::Url(why.to_owned());
        let (scheme, rest) = url
            .split_once("://")
            .filter(|(s, _)| matches!(*s, "postgres" | "postgresql"))
            .ok_or_else(|| bad("it must start with postgres:// or postgresql://"))?;
        let end = rest.find(['/', '?']).unwrap_or(rest.len());
        let (authority, tail) = rest.split_at(end);
        let (userinfo, hostlist) = match authority.rfind('@') {
            Some(at) => (&authority[..=at], &authority[at + 1..]),
            None => ("", authority),
        };
        // target_session_attrs is libpq's, not sqlx's: taken out of the query.
        let (path, query) = tail.split_once('?').unwrap_or((tail, ""));
        let mut read_write = false;
        let mut params = Vec::new();
        for kv in query.split('&').filter(|kv| !kv.is_empty()) {
            match kv.split_once('=') {
                Some(("target_session_attrs", v)) => match v {
                    "any" => read_write = false,
                    "read-write" | "primary" => read_write = true,
                    other => return Err(ServersError::SessionAttrs(other.to_owned())),
                },
                _ => params.push(kv),
            }
        }
        let query = if params.is_empty() {
            String::new()
        } else {
            format!("?{}", params.join("&"))
        };
        let hosts = hostlist
            .split(',')
            .map(|host| {
                if host.is_empty() && hostlist.contains(',') {
                    return Err(bad("an empty host in the host list"));
                }
                let one = format!("{scheme}://{userinfo}{host}{path}{query}");
                PgConnectOptions::from_str(&one).map_err(|e| ServersError::Url(e.to_string()))
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Servers {
            hosts,
            read_write,
            preferred: AtomicUsize::new(0),
        })
    }
}

impl Servers {
    /// How many servers the URL names.
    pub fn len(&self) -> usize {
        self.hosts.len()
    }

    /// Never true: a URL names at least one server.
    pub fn is_empty(&self) -> bool {
        self.hosts.is_empty()
    }

    /// Whether sessions must accept writes (`target_session_attrs=read-write`).
    pub fn read_write(&self) -> bool {
        self.read_write
    }

    /// The options of the server that last accepted a session.
    pub fn options(&self) -> PgConnectOptions {
        self.hosts[self.preferred.load(Relaxed) % self.hosts.len()].clone()
    }

    /// A session on the first server that accepts one (and, with
    /// `read-write`, accepts writes), trying the last good one first. Each
    /// server gets `per_server` to answer.
    pub async fn connect(
        &self,
        application_name: &str,
        per_server: Duration,
    ) -> Result<PgConnection, sqlx::Error> {
        let start = self.preferred.load(Relaxed);
        let mut tried = Vec::new();
        let mut last = None;
        for i in (0..self.hosts.len()).map(|k| (start + k) % self.hosts.len()) {
            // sqlx's own slow-statement warning prints the whole statement
            // (a claim is a kilobyte over dozens of lines); the relay says
            // which of its statements was slow in one line instead.
            let opts = self.hosts[i]
                .clone()
                .application_name(application_name)
                .log_slow_statements(log::LevelFilter::Off, Duration::from_secs(1));
            let attempt = async {
                let mut c = opts.connect().await?;
                if self.read_write && !accepts_writes(&mut c).await? {
                    let _ = c.close().await;
                    return Ok(None);
                }
                Ok::<_, sqlx::Error>(Some(c))
            };
            let host = format!("{}:{}", self.hosts[i].get_host(), self.hosts[i].get_port());
            match tokio::time::timeout(per_server, attempt).await {
                Ok(Ok(Some(c))) => {
                    self.preferred.store(i, Relaxed);
                    return Ok(c);
                }
                Ok(Ok(None)) => tried.push(format!("{host} is read-only")),
                Ok(Err(e)) => {
                    tried.push(format!("{host}: {e}"));
                    last = Some(e);
                }
                Err(_) => tried.push(format!("{host}: no answer within {per_server:?}")),
            }
        }
        match last {
            // One server only and it failed: its own error says most.
            Some(e) if self.hosts.len() == 1 => Err(e),
            _ => Err(none_writable(&tried)),
        }
    }

    /// A pool on the preferred server; with `read-write`, a session that
    /// turns out read-only is refused (the pool tries again). Keep
    /// [`follow_primary`](Self::follow_primary) running beside it so the
    /// pool moves when the primary does.
    pub fn pool(self: &std::sync::Arc<Self>, options: sqlx::postgres::PgPoolOptions) -> PgPool {
        let options = if self.read_write {
            options.after_connect(|c, _| {
                Box::pin(async move {
                    if accepts_writes(c).await? {
                        Ok(())
                    } else {
                        Err(sqlx::Error::Protocol(
                            "the server is read-only (target_session_attrs=read-write)".into(),
                        ))
                    }
                })
            })
        } else {
            options
        };
        options.connect_lazy_with(self.options())
    }

    /// Until `shutdown`: every `every`, check that `pool`'s server still takes
    /// writes; if not (dead, or a standby now), find the one that does and
    /// point the pool's new sessions at it. Returns at once for a one-server
    /// URL.
    pub async fn follow_primary(
        &self,
        pool: &PgPool,
        every: Duration,
        shutdown: impl std::future::Future<Output = ()>,
    ) {
        if self.hosts.len() < 2 {
            return;
        }
        tokio::pin!(shutdown);
        loop {
            tokio::select! {
                _ = &mut shutdown => return,
                _ = tokio::time::sleep(every) => {}
            }
            let healthy = tokio::time::timeout(every.max(Duration::from_secs(1)), async {
                let mut c = pool.acquire().await?;
                accepts_writes(&mut c).await
            })
            .await;
            if matches!(healthy, Ok(Ok(true))) {
                continue;
            }
            let before = self.preferred.load(Relaxed);
            match self
                .connect("postbox-failover-probe", every.max(Duration::from_secs(1)))
                .await
            {
                Ok(c) => {
                    let _ = c.close().await;
                    let now = self.preferred.load(Relaxed);
                    if now != before {
                        tracing::warn!(
                            from = %format!("{}:{}", self.hosts[before].get_host(), self.hosts[before].get_port()),
                            to = %format!("{}:{}", self.hosts[now].get_host(), self.hosts[now].get_port()),
                            "PostgreSQL primary moved; new sessions go to the new one"
                        );
                    }
                    pool.set_connect_options(self.options());
                }
                Err(e) => tracing::warn!(error = %e, "no PostgreSQL primary found yet"),
            }
        }
    }
}

/// Whether this session may write: not a standby, not read-only by default.
async fn accepts_writes(c: &mut PgConnection) -> Result<bool, sqlx::Error> {
    crate::sql::statement_scalar(
        "SELECT NOT (pg_is_in_recovery() OR current_setting('default_transaction_read_only')::bool)",
    )
    .fetch_one(&mut *c)
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_host_list_becomes_one_option_set_per_host() {
        let s: Servers =
            "postgres://u:p@a:5432,b:5433/db?sslmode=disable&target_session_attrs=read-write"
                .parse()
                .unwrap();
        assert_eq!(s.len(), 2);
        assert!(s.read_write());
        let hosts: Vec<_> = s
            .hosts
            .iter()
            .map(|o| {
                (
                    o.get_host().to_owned(),
                    o.get_port(),
                    o.get_database().map(str::to_owned),
                )
            })
            .collect();
        assert_eq!(
            hosts,
            vec![
                ("a".into(), 5432, Some("db".into())),
                ("b".into(), 5433, Some("db".into()))
            ]
        );
        assert_eq!(s.options().get_username(), "u");
    }

    #[test]
    fn one_host_and_defaults() {
        let s: Servers = "postgres://localhost/db".parse().unwrap();
        assert_eq!((s.len(), s.read_write()), (1, false));
        let s: Servers = "postgresql://u@h".parse().unwrap();
        assert_eq!(s.options().get_host(), "h");
    }

    #[test]
    fn bad_urls_say_what_is_wrong() {
        let e = "mysql://h/db".parse::<Servers>().unwrap_err().to_string();
        assert!(e.contains("postgres://"), "{e}");
        let e = "postgres://a,,b/db"
            .parse::<Servers>()
            .unwrap_err()
            .to_string();
        assert!(e.contains("empty host"), "{e}");
        let e = "postgres://a/db?target_session_attrs=standby"
            .parse::<Servers>()
            .unwrap_err()
            .to_string();
        assert!(e.contains("standby") && e.contains("read-write"), "{e}");
    }

    /// The test server's URL with a dead server put in front of it.
    fn behind_a_dead_server(extra: &str) -> String {
        let url = postbox_testkit::database_url();
        let dead = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let (scheme, rest) = url.split_once("://").unwrap();
        let at = rest.find('@').map_or(0, |i| i + 1);
        let sep = if rest.contains('?') { '&' } else { '?' };
        format!(
            "{scheme}://{}127.0.0.1:{dead},{}{sep}{extra}",
            &rest[..at],
            &rest[at..]
        )
    }

    #[tokio::test]
    async fn a_dead_server_is_skipped_and_the_good_one_tried_first_next_time() {
        let s: Servers = behind_a_dead_server("target_session_attrs=read-write")
            .parse()
            .unwrap();
        let c = s
            .connect("postbox-test", Duration::from_secs(5))
            .await
            .unwrap();
        drop(c);
        assert_eq!(s.preferred.load(Relaxed), 1);
        assert_eq!(s.options().get_port(), s.hosts[1].get_port());
    }

    #[tokio::test]
    async fn read_only_servers_are_refused_with_read_write() {
        // Every session of this URL is read-only: nothing may be chosen.
        let s: Servers = behind_a_dead_server(
            "target_session_attrs=read-write&options=-c%20default_transaction_read_only%3Don",
        )
        .parse()
        .unwrap();
        let e = s
            .connect("postbox-test", Duration::from_secs(5))
            .await
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("no PostgreSQL server") && e.contains("is read-only"),
            "{e}"
        );
        // Without read-write the same server is fine.
        let s: Servers = behind_a_dead_server("options=-c%20default_transaction_read_only%3Don")
            .parse()
            .unwrap();
        s.connect("postbox-test", Duration::from_secs(5))
            .await
            .unwrap();
    }
}
