//! Who may use the console, and how a request proves it.
//!
//! Users come from a file (or an environment variable), never from the
//! command line: one per line, `name role token`, where `role` is `viewer`
//! (read only) or `admin` (may replay and purge), and `token` is the secret
//! itself or `sha256:<hex>` of it. Scripts send `Authorization: Bearer
//! <token>`; a browser signs in with its token once and then carries a
//! session cookie signed by the console. Every state-changing request made
//! with that cookie must carry the session's CSRF token (a form field or the
//! `x-csrf-token` header); a bearer request cannot be forged by another site,
//! so it needs none.

use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// What a user may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Read every page and endpoint.
    Viewer,
    /// Also replay and purge.
    Admin,
}

/// One console user.
#[derive(Debug, Clone)]
pub struct User {
    /// The name shown and recorded in the audit table.
    pub name: String,
    /// What the user may do.
    pub role: Role,
    token_sha256: [u8; 32],
}

/// The console's users.
#[derive(Debug, Clone, Default)]
pub struct Users(Vec<User>);

/// A users file that cannot be right; the text names the line.
#[derive(Debug, thiserror::Error)]
#[error("users, line {line}: {problem}")]
pub struct UsersError {
    /// 1-based line number.
    pub line: usize,
    /// What is wrong and what to write instead.
    pub problem: String,
}

fn sha256(s: &[u8]) -> [u8; 32] {
    Sha256::digest(s).into()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(s: &str) -> Option<[u8; 32]> {
    if s.len() != 64 {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, b) in out.iter_mut().enumerate() {
        *b = u8::from_str_radix(s.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(out)
}

/// Constant-time equality of two digests.
fn same(a: &[u8; 32], b: &[u8; 32]) -> bool {
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

impl Users {
    /// Parse `name role token` lines; `#` starts a comment.
    pub fn parse(text: &str) -> Result<Users, UsersError> {
        let mut users: Vec<User> = Vec::new();
        for (i, raw) in text.lines().enumerate() {
            let line = raw.split('#').next().unwrap_or("").trim();
            if line.is_empty() {
                continue;
            }
            let bad = |problem: String| UsersError {
                line: i + 1,
                problem,
            };
            let parts: Vec<&str> = line.split_whitespace().collect();
            let [name, role, token] = parts[..] else {
                return Err(bad(format!(
                    "expected `name role token` (3 fields), found {}",
                    parts.len()
                )));
            };
            if !name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "._@-".contains(c))
            {
                return Err(bad(format!(
                    "user name {name:?} may hold letters, digits and . _ @ - only"
                )));
            }
            let role = match role {
                "viewer" => Role::Viewer,
                "admin" => Role::Admin,
                other => {
                    return Err(bad(format!(
                        "role {other:?} is neither `viewer` (read only) nor `admin` (may replay and purge)"
                    )))
                }
            };
            let token_sha256 = match token.strip_prefix("sha256:") {
                Some(h) => unhex(&h.to_ascii_lowercase()).ok_or_else(|| {
                    bad("sha256: must be followed by 64 hex digits (`printf %s TOKEN | sha256sum`)".into())
                })?,
                None if token.len() < 16 => {
                    return Err(bad(format!(
                        "the token of {name} has {} characters; use at least 16 (e.g. `openssl rand -hex 24`)",
                        token.len()
                    )))
                }
                None => sha256(token.as_bytes()),
            };
            if users.iter().any(|u| u.name == name) {
                return Err(bad(format!("user {name} is listed twice")));
            }
            if users.iter().any(|u| same(&u.token_sha256, &token_sha256)) {
                return Err(bad(format!("the token of {name} is another user's too")));
            }
            users.push(User {
                name: name.to_owned(),
                role,
                token_sha256,
            });
        }
        Ok(Users(users))
    }

    /// No user at all: the console refuses to start.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The user whose token this is.
    pub fn by_token(&self, token: &str) -> Option<&User> {
        let digest = sha256(token.as_bytes());
        self.0.iter().find(|u| same(&u.token_sha256, &digest))
    }

    fn by_name(&self, name: &str) -> Option<&User> {
        self.0.iter().find(|u| u.name == name)
    }
}

/// Signs session cookies and CSRF tokens with a key made at start-up: a
/// restart signs everyone out.
pub struct Signer {
    key: [u8; 32],
}

/// How long a browser session lasts.
pub const SESSION: Duration = Duration::from_secs(12 * 3600);

impl Signer {
    /// A signer with a fresh random key.
    pub fn random() -> Signer {
        Signer {
            key: rand::random(),
        }
    }

    fn mac(&self, parts: &[&str]) -> String {
        let mut mac = Hmac::<Sha256>::new_from_slice(&self.key).expect("any key length");
        for p in parts {
            mac.update(p.as_bytes());
            mac.update(b"\n");
        }
        hex(&mac.finalize().into_bytes())
    }

    /// The cookie value of a new session of `user`: `name.expiry.signature`.
    pub fn session(&self, user: &User) -> String {
        let expires = (SystemTime::now() + SESSION)
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let expires = expires.to_string();
        format!(
            "{}.{expires}.{}",
            user.name,
            self.mac(&["session", &user.name, &expires])
        )
    }

    /// The user of a session cookie still valid, as the users file says now
    /// (a user removed from it, or whose role changed, is seen at once).
    pub fn user_of<'u>(&self, users: &'u Users, cookie: &str) -> Option<&'u User> {
        let mut parts = cookie.rsplitn(3, '.');
        let (sig, expires, name) = (parts.next()?, parts.next()?, parts.next()?);
        let good = self.mac(&["session", name, expires]);
        if !same(&sha256(good.as_bytes()), &sha256(sig.as_bytes())) {
            return None;
        }
        let expires: u64 = expires.parse().ok()?;
        let now = SystemTime::now().duration_since(UNIX_EPOCH).ok()?.as_secs();
        if now >= expires {
            return None;
        }
        users.by_name(name)
    }

    /// The CSRF token of a session (bound to its cookie value).
    pub fn csrf(&self, cookie: &str) -> String {
        self.mac(&["csrf", cookie])
    }

    /// Whether `token` is the CSRF token of the session `cookie`.
    pub fn csrf_ok(&self, cookie: &str, token: &str) -> bool {
        same(
            &sha256(self.csrf(cookie).as_bytes()),
            &sha256(token.as_bytes()),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FILE: &str = "# who may use the console\n\
        alice admin 0123456789abcdef0123\n\
        bob viewer sha256:5e884898da28047151d0e56f8dc6292773603d0d6aabbdd62a11ef721d1542d8 # password\n";

    #[test]
    fn users_parse_and_tokens_match_plain_or_hashed() {
        let users = Users::parse(FILE).unwrap();
        assert_eq!(
            users.by_token("0123456789abcdef0123").unwrap().role,
            Role::Admin
        );
        assert_eq!(users.by_token("password").unwrap().name, "bob");
        assert!(users.by_token("guess").is_none());
    }

    #[test]
    fn bad_lines_name_the_line_and_the_fix() {
        let e = Users::parse("a admin\n").unwrap_err();
        assert_eq!(e.line, 1);
        assert!(e.problem.contains("3 fields"), "{e}");
        let e = Users::parse("\na root 0123456789abcdef0\n").unwrap_err();
        assert_eq!(e.line, 2);
        assert!(e.problem.contains("viewer"), "{e}");
        let e = Users::parse("a admin short\n").unwrap_err();
        assert!(e.problem.contains("at least 16"), "{e}");
        let e =
            Users::parse("a admin 0123456789abcdef0\nb viewer 0123456789abcdef0\n").unwrap_err();
        assert!(e.problem.contains("another user's"), "{e}");
    }

    #[test]
    fn sessions_verify_and_forgeries_do_not() {
        let users = Users::parse(FILE).unwrap();
        let signer = Signer::random();
        let alice = users.by_token("0123456789abcdef0123").unwrap();
        let cookie = signer.session(alice);
        assert_eq!(signer.user_of(&users, &cookie).unwrap().name, "alice");
        let forged = cookie.replacen("alice", "bob", 1);
        assert!(signer.user_of(&users, &forged).is_none());
        assert!(
            Signer::random().user_of(&users, &cookie).is_none(),
            "another key"
        );
        let csrf = signer.csrf(&cookie);
        assert!(signer.csrf_ok(&cookie, &csrf));
        assert!(!signer.csrf_ok(&cookie, "x"));
        assert!(!signer.csrf_ok(&forged, &csrf));
    }
}
