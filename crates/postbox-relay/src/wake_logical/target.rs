//! Where the replication session connects, read from the relay's URL.

use crate::Secret;
use pgwire_replication::{ReplicationConfig, TlsConfig};
use std::collections::HashMap;

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
pub(super) struct ReplicationTarget {
    pub(super) host: String,
    pub(super) port: u16,
    pub(super) user: String,
    password: Password,
    pub(super) database: String,
}

/// Shown as `***` by `Debug`.
struct Password(String);

impl std::fmt::Debug for Password {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("***")
    }
}

impl ReplicationTarget {
    pub(super) fn parse(url: &Secret) -> Result<ReplicationTarget, String> {
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
        Ok(ReplicationTarget {
            database: opts.get_database().unwrap_or(&user).to_owned(),
            host,
            port: opts.get_port(),
            user,
            password: Password(password),
        })
    }

    /// Never log the result: its `Debug` shows the password.
    pub(super) fn replication_config(
        &self,
        slot: &str,
        publications: Vec<String>,
    ) -> ReplicationConfig {
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

    #[test]
    pub(super) fn reads_the_url_like_the_other_sessions() {
        let t = ReplicationTarget::parse(&Secret::new(
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
        let t = ReplicationTarget::parse(&Secret::new(
            "postgres://u@127.0.0.1/db?sslmode=disable&password=x",
        ))
        .unwrap();
        assert_eq!((t.password.0.as_str(), t.port), ("x", 5432));
        let t = ReplicationTarget::parse(&Secret::new("postgres://u@h:1/?host=/run/pg")).unwrap();
        assert_eq!((t.host.as_str(), t.database.as_str()), ("/run/pg", "u"));
        for mode in ["require", "verify-ca", "verify-full"] {
            let e = ReplicationTarget::parse(&Secret::new(format!(
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
}
