//! `postbox console`: its JSON API over real dead letters (both sides),
//! sign-in, roles, CSRF and the audit table. The pages in a real browser are
//! in browser.rs.

mod api;
mod browser;
mod sessions;

use crate::support::*;
use serde_json::{json, Value};
use tokio::io::AsyncBufReadExt;

pub(crate) const ADMIN: &str = "admin-token-0123456789abcdef";
pub(crate) const VIEWER: &str = "viewer-token-0123456789abcdef";

/// A running `postbox console` on a free port (killed on drop).
pub(crate) struct ConsoleProcess {
    _child: tokio::process::Child,
    pub(crate) base: String,
    log: std::sync::Arc<std::sync::Mutex<String>>,
}

impl ConsoleProcess {
    pub(crate) async fn start(schema: &str, extra: &[&str]) -> ConsoleProcess {
        Self::start_as(&postbox_testkit::database_url(), schema, extra).await
    }

    /// Start it reading through `url` (another role's).
    pub(crate) async fn start_as(url: &str, schema: &str, extra: &[&str]) -> ConsoleProcess {
        let users = format!("alice admin {ADMIN}\nvic viewer {VIEWER}\n");
        let mut child = tokio::process::Command::new(BIN)
            .args(["console", "--database-url", url])
            .args(["--schema", schema, "--listen", "127.0.0.1:0"])
            .args(extra)
            .env("POSTBOX_CONSOLE_USERS", users)
            .env("RUST_LOG", "info")
            .env("NO_COLOR", "1")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("spawn postbox console");
        let mut lines = tokio::io::BufReader::new(child.stderr.take().unwrap()).lines();
        let mut seen = Vec::new();
        let addr = tokio::time::timeout(LONG, async {
            while let Some(line) = lines.next_line().await.unwrap() {
                if let Some(rest) = line.split("console on http://").nth(1) {
                    return rest.split('/').next().unwrap().to_owned();
                }
                seen.push(line);
            }
            panic!("postbox console exited:\n{}", seen.join("\n"));
        })
        .await
        .expect("the console starts");
        // Keep draining its log so it never blocks on a full pipe.
        let log = std::sync::Arc::new(std::sync::Mutex::new(seen.join("\n")));
        let kept = log.clone();
        tokio::spawn(async move {
            while let Ok(Some(line)) = lines.next_line().await {
                let mut log = kept.lock().unwrap();
                log.push_str(&line);
                log.push('\n');
            }
        });
        ConsoleProcess {
            _child: child,
            base: format!("http://{addr}"),
            log,
        }
    }

    /// What it has logged so far.
    pub(crate) fn output(&self) -> String {
        self.log.lock().unwrap().clone()
    }
}

/// Dead letters of both sides, as the relay and a consumer would leave them:
/// three of one failure (ids and numbers differ), two of another, one
/// consumer dead letter.
pub(crate) async fn seed(ctx: &Ctx) {
    let s = &ctx.schema;
    for (id, error) in [
        (1, "exchange \"orders\" does not exist: declare it (attempt 10 of 10) event 5f0e1f2a-1111-4a4a-8b8b-000000000001"),
        (2, "exchange \"orders\" does not exist: declare it (attempt 10 of 10) event 5f0e1f2a-1111-4a4a-8b8b-000000000002"),
        (3, "exchange \"orders\" does not exist: declare it (attempt 7 of 7) event 5f0e1f2a-1111-4a4a-8b8b-000000000003"),
        (4, "payload is 2048 bytes, more than max_message_bytes (1024) (attempt 10 of 10)"),
        (5, "payload is 4096 bytes, more than max_message_bytes (1024) (attempt 10 of 10)"),
    ] {
        sqlx::query(&format!(
            "INSERT INTO {s}.outbox_dead_letter (id, event_id, topic, event, key, payload, headers, created_at, attempts, last_error)
             VALUES ($1, gen_random_uuid(), $2, 'order.placed', $3, '{{\"n\": 1}}', '{{}}', now(), 10, $4)"
        ))
        .bind(id as i64)
        .bind(if id <= 3 { "orders" } else { "big" })
        .bind(format!("k{id}"))
        .bind(error)
        .execute(&ctx.pool)
        .await
        .unwrap();
    }
    sqlx::query(&format!(
        "INSERT INTO {s}.inbox_dead_letter (consumer, message_id, topic, name, key, payload, headers, source, attempts, last_error)
         VALUES ('shipping', 'm-1', 'orders', 'order.placed', 'k1', '\\x7b7d', '[]', 'test', 5, 'handler failed: missing field id (run 5 of 5)')"
    ))
    .execute(&ctx.pool)
    .await
    .unwrap();
}

/// A client for one console.
pub(crate) struct Client {
    pub(crate) http: reqwest::Client,
    pub(crate) base: String,
}

impl Client {
    pub(crate) fn new(console: &ConsoleProcess) -> Client {
        Client {
            http: reqwest::Client::builder()
                .redirect(reqwest::redirect::Policy::none())
                .build()
                .unwrap(),
            base: console.base.clone(),
        }
    }

    /// GET `path` with `token` (None: no credentials): (status, JSON body).
    pub(crate) async fn get(&self, path: &str, token: Option<&str>) -> (u16, Value) {
        let mut r = self.http.get(format!("{}{path}", self.base));
        if let Some(t) = token {
            r = r.bearer_auth(t);
        }
        let resp = r.send().await.unwrap();
        let status = resp.status().as_u16();
        (status, json_of(resp).await)
    }

    /// POST JSON `body` to `path` with `token`.
    pub(crate) async fn post(&self, path: &str, token: Option<&str>, body: Value) -> (u16, Value) {
        let mut r = with_json(self.http.post(format!("{}{path}", self.base)), &body);
        if let Some(t) = token {
            r = r.bearer_auth(t);
        }
        let resp = r.send().await.unwrap();
        let status = resp.status().as_u16();
        (status, json_of(resp).await)
    }
}

/// The body as JSON (null when it is not).
pub(crate) async fn json_of(resp: reqwest::Response) -> Value {
    serde_json::from_str(&resp.text().await.unwrap()).unwrap_or(Value::Null)
}

/// A JSON request body.
pub(crate) fn with_json(r: reqwest::RequestBuilder, body: &Value) -> reqwest::RequestBuilder {
    r.header("content-type", "application/json")
        .body(body.to_string())
}

/// A form request body (`application/x-www-form-urlencoded`).
pub(crate) fn with_form(
    r: reqwest::RequestBuilder,
    fields: &[(&str, &str)],
) -> reqwest::RequestBuilder {
    let body: Vec<String> = fields
        .iter()
        .map(|(k, v)| format!("{}={}", urlencode(k), urlencode(v)))
        .collect();
    r.header("content-type", "application/x-www-form-urlencoded")
        .body(body.join("&"))
}

/// Percent-encode a query or form value.
pub(crate) fn urlencode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

pub(crate) fn group_body(fingerprint: &str, confirmed: i64) -> Value {
    json!({"side": "relay", "filter": {"fingerprint": fingerprint}, "confirmed_count": confirmed})
}
