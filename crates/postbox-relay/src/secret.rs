//! Connection URLs that may carry a password: shown and logged with the
//! password replaced by `***`.

use serde::{Deserialize, Serialize};
use std::fmt;

/// A connection URL that may carry a password. `Debug`/`Display` show it with
/// the password replaced by `***`, so it is safe in logs and errors.
#[derive(Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Secret(String);

impl Secret {
    /// Wrap a URL.
    pub fn new(s: impl Into<String>) -> Self {
        Secret(s.into())
    }
    /// The real value, for the client library only.
    pub fn expose(&self) -> &str {
        &self.0
    }
    /// The value with any password replaced by `***`.
    pub fn redacted(&self) -> String {
        redact_url(&self.0)
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.redacted())
    }
}
impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.redacted())
    }
}

/// `scheme://user:pass@host/...` → `scheme://user:***@host/...`; also
/// `password=...` query parameters.
pub fn redact_url(url: &str) -> String {
    let mut out = url.to_owned();
    if let Some(scheme_end) = out.find("://") {
        let rest_start = scheme_end + 3;
        let authority_end = out[rest_start..]
            .find(['/', '?', '#'])
            .map_or(out.len(), |i| rest_start + i);
        if let Some(at) = out[rest_start..authority_end].rfind('@') {
            let userinfo = &out[rest_start..rest_start + at];
            if let Some(colon) = userinfo.find(':') {
                out.replace_range(rest_start + colon + 1..rest_start + at, "***");
            }
        }
    }
    if let Some(q) = out.find('?') {
        let (head, query) = out.split_at(q + 1);
        let redacted: Vec<String> = query
            .split('&')
            .map(|kv| match kv.split_once('=') {
                Some((k, _)) if k.eq_ignore_ascii_case("password") => format!("{k}=***"),
                _ => kv.to_owned(),
            })
            .collect();
        out = format!("{head}{}", redacted.join("&"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redacts_passwords() {
        assert_eq!(
            redact_url("postgres://u:hunter2@h:5432/db?sslmode=require"),
            "postgres://u:***@h:5432/db?sslmode=require"
        );
        assert_eq!(redact_url("redis://:pw@h:6379"), "redis://:***@h:6379");
        assert_eq!(
            redact_url("postgres://h/db?user=u&password=pw"),
            "postgres://h/db?user=u&password=***"
        );
        assert_eq!(redact_url("redis://h:6379"), "redis://h:6379");
        let s = Secret::new("postgres://u:canary-pw@h/db");
        assert!(!format!("{s} {s:?}").contains("canary-pw"));
    }
}
