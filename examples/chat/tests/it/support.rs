//! Start a pair of chat services for one test and talk to them.

#![allow(dead_code)]

pub use chat::http::Http;
pub use postbox_testkit::wait_until;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

pub const BIN: &str = env!("CARGO_BIN_EXE_chat");
pub const LONG: Duration = Duration::from_secs(60);

/// One running service.
pub struct Side {
    pub service: &'static str,
    pub schema: String,
    pub port: u16,
    pub db_url: String,
    child: Option<tokio::process::Child>,
    /// Node.js services run without an embedded relay: their own `postbox relay`.
    relay: Option<tokio::process::Child>,
    lines: Arc<Mutex<Vec<String>>>,
    peer_schema: String,
    /// Run with the Node.js implementation (examples/chat/node).
    pub node: bool,
}

impl Side {
    pub fn base(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    pub fn output(&self) -> String {
        self.lines.lock().unwrap().join("\n")
    }

    fn spawn(&mut self) {
        let args: Vec<String> = [
            "--service",
            self.service,
            "--peer",
            if self.service == "consumers" {
                "workers"
            } else {
                "consumers"
            },
            "--schema",
            &self.schema,
            "--peer-schema",
            &self.peer_schema,
            "--database-url",
            &self.db_url,
            "--redis-url",
            &postbox_testkit::redis_url(),
            "--listen",
            &format!("127.0.0.1:{}", self.port),
            "--lock-duration-ms",
            "5000",
        ]
        .map(String::from)
        .to_vec();
        let (program, args) = if self.node {
            chat::node::check_installed().expect("the Node chat service");
            self.relay = Some(self.spawn_relay());
            chat::node::command(args)
        } else {
            let mut all = vec!["serve".to_owned(), "--embedded-relay".to_owned()];
            all.extend(args);
            (BIN.into(), all)
        };
        let mut child = tokio::process::Command::new(program)
            .args(args)
            .env("RUST_LOG", "warn,sqlx=error")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("spawn chat serve");
        let lines = self.lines.clone();
        chat::lines::forward_lines(&mut child, move |l| {
            lines.lock().unwrap().push(l.to_owned())
        });
        self.child = Some(child);
    }

    /// `postbox relay` for this side's schema, as the service's own role.
    fn spawn_relay(&self) -> tokio::process::Child {
        let postbox = std::path::Path::new(BIN).with_file_name("postbox");
        assert!(
            postbox.exists(),
            "{} is not built: run the workspace build",
            postbox.display()
        );
        tokio::process::Command::new(postbox)
            .args([
                "relay",
                "--database-url",
                &self.db_url,
                "--schemas",
                &self.schema,
                "--redis-url",
                &postbox_testkit::redis_url(),
                "--workers",
                "1",
            ])
            .env("RUST_LOG", "warn")
            .env_remove("POSTBOX_CONFIG")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .expect("spawn postbox relay")
    }

    async fn wait_healthy(&self) {
        let url = format!("{}/healthz", self.base());
        wait_until(LONG, &format!("{} to serve", self.service), || {
            let url = url.clone();
            async move { Http.get(&url).await.is_ok() }
        })
        .await;
    }

    /// SIGTERM (a deploy) and wait for a clean exit.
    pub async fn stop(&mut self) {
        if let Some(mut c) = self.relay.take() {
            let _ = Command::new("kill")
                .args(["-TERM", &c.id().unwrap().to_string()])
                .status();
            let _ = tokio::time::timeout(Duration::from_secs(20), c.wait()).await;
        }
        if let Some(mut c) = self.child.take() {
            let pid = c.id().unwrap();
            Command::new("kill")
                .args(["-TERM", &pid.to_string()])
                .status()
                .unwrap();
            let status = tokio::time::timeout(Duration::from_secs(20), c.wait())
                .await
                .expect("stops within 20s")
                .unwrap();
            assert!(
                status.success(),
                "{} exited with {status}\n{}",
                self.service,
                self.output()
            );
        }
    }

    /// Start again after [`stop`](Self::stop).
    pub async fn start(&mut self) {
        self.spawn();
        self.wait_healthy().await;
    }

    pub async fn send(&self, chat: i64, body: &str) -> serde_json::Value {
        Http.post_json(
            &format!("{}/api/chats/{chat}/messages", self.base()),
            &serde_json::json!({ "body": body }),
        )
        .await
        .unwrap()
    }

    pub async fn history(&self, chat: i64) -> Vec<serde_json::Value> {
        Http.get(&format!("{}/api/chats/{chat}/messages", self.base()))
            .await
            .unwrap()
            .as_array()
            .cloned()
            .unwrap_or_default()
    }
}

/// Both services, set up with their own roles in fresh schemas.
pub struct Pair {
    pub consumers: Side,
    pub workers: Side,
    pub admin: sqlx::PgPool,
}

impl Pair {
    pub async fn start() -> Pair {
        Pair::start_with_node(None).await
    }

    /// Both services, `node` (`"consumers"` or `"workers"`) in Node.js.
    pub async fn start_with_node(node: Option<&str>) -> Pair {
        let sfx = postbox_testkit::suffix();
        let (c, w) = (format!("t{sfx}_consumers"), format!("t{sfx}_workers"));
        let admin_url = postbox_testkit::database_url();
        let out = Command::new(BIN)
            .args([
                "setup",
                "--admin-url",
                &admin_url,
                "--schema",
                &c,
                "--schema",
                &w,
                "--reset",
            ])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "chat setup: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let side = |service: &'static str, schema: &str, peer: &str| Side {
            service,
            schema: schema.to_owned(),
            peer_schema: peer.to_owned(),
            port: postbox_testkit::free_port(),
            db_url: chat::setup::service_url(
                &admin_url,
                &postbox::SchemaName::new(schema).unwrap(),
                "chat",
            )
            .unwrap(),
            child: None,
            relay: None,
            lines: Default::default(),
            node: node == Some(service),
        };
        let mut pair = Pair {
            consumers: side("consumers", &c, &w),
            workers: side("workers", &w, &c),
            admin: postbox_testkit::pool().await,
        };
        pair.consumers.spawn();
        pair.workers.spawn();
        pair.consumers.wait_healthy().await;
        pair.workers.wait_healthy().await;
        pair
    }

    /// Count of rows in `<side schema>.<table>` (read as admin).
    pub async fn count(&self, side: &Side, table: &str) -> i64 {
        sqlx::query_scalar(&format!("SELECT count(*) FROM {}.{table}", side.schema))
            .fetch_one(&self.admin)
            .await
            .unwrap()
    }

    /// Stop both services (SIGTERM, clean exit) and drop their schemas and roles.
    pub async fn finish(mut self) {
        self.consumers.stop().await;
        self.workers.stop().await;
        for s in [&self.consumers.schema, &self.workers.schema] {
            let role = format!("chat_{s}");
            let _ = sqlx::raw_sql(&format!("DROP SCHEMA IF EXISTS {s} CASCADE; DROP OWNED BY {role} CASCADE; DROP ROLE IF EXISTS {role};"))
                .execute(&self.admin)
                .await;
        }
    }
}
