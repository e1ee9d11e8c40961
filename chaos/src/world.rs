//! A running chat system for one scenario: its own Redis, per-run schemas and
//! roles, both services and their relays, all real processes.

use crate::history::{History, Kind, Msg};
use crate::infra::{free_port, sibling, Proc, Redis};
use chat::http::Http;
use chat::setup::{service_url, SetupArgs};
use postbox::SchemaName;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Shortened like the seed's test (BullMQ's default is 30 s).
pub const LOCK_MS: u64 = 5000;

/// One chat service and the relays of its schema.
pub struct Service {
    pub svc: Proc,
    pub relays: Vec<Proc>,
    pub port: u16,
    pub url: String,
    pub schema: String,
}

impl Service {
    /// Start the relays and the service; wait until it serves.
    pub async fn start(&mut self, env: &[(&str, &str)]) -> Result<(), chat::Error> {
        for r in &mut self.relays {
            r.start(&[])?;
        }
        self.start_service(env).await
    }

    pub async fn start_service(&mut self, env: &[(&str, &str)]) -> Result<(), chat::Error> {
        self.svc.start(env)?;
        let url = format!("http://127.0.0.1:{}/healthz", self.port);
        let deadline = Instant::now() + Duration::from_secs(20);
        while Http.get(&url).await.is_err() {
            if Instant::now() > deadline {
                return Err(format!("{} did not come up", self.svc.name).into());
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Ok(())
    }

    /// SIGTERM the service and its relays (a deploy's stop).
    pub async fn stop(&mut self) -> Result<(), chat::Error> {
        self.svc.stop().await?;
        for r in &mut self.relays {
            r.stop().await?;
        }
        Ok(())
    }
}

pub struct World {
    pub history: History,
    pub redis: Redis,
    pub consumers: Service,
    pub workers: Service,
    pub admin: sqlx::PgPool,
    postbox_bin: PathBuf,
    v2: bool,
}

/// How to build a world.
pub struct Options {
    /// postbox (true) or the naive dual write (false).
    pub v2: bool,
    /// Relay processes for the consumers schema (v2).
    pub consumers_relays: usize,
    /// Extra flags for every relay.
    pub relay_flags: Vec<String>,
}

impl World {
    pub async fn start(admin_url: &str, o: Options) -> Result<World, chat::Error> {
        let history = History::new();
        let chat_bin = sibling("chat")?;
        let postbox_bin = sibling("postbox")?;
        let redis = Redis::start(history.clone()).await?;
        let sfx = &uuid::Uuid::new_v4().simple().to_string()[..8];
        let (cs, ws) = (
            format!("chaos_{sfx}_consumers"),
            format!("chaos_{sfx}_workers"),
        );
        chat::setup::run(SetupArgs {
            admin_url: admin_url.to_owned(),
            schemas: vec![cs.clone(), ws.clone()],
            role_password: "chat".into(),
            reset: true,
        })
        .await?;
        let mode = if o.v2 { "v2" } else { "v1" };
        let make = |service: &str,
                    peer: &str,
                    schema: &str,
                    peer_schema: &str,
                    relays: usize|
         -> Result<Service, chat::Error> {
            let url = service_url(admin_url, &SchemaName::new(schema)?, "chat")?;
            let port = free_port();
            let svc = Proc::new(
                service,
                chat_bin.clone(),
                [
                    "serve",
                    "--service",
                    service,
                    "--peer",
                    peer,
                    "--schema",
                    schema,
                    "--peer-schema",
                    peer_schema,
                    "--database-url",
                    &url,
                    "--redis-url",
                    &redis.url(),
                    "--listen",
                    &format!("127.0.0.1:{port}"),
                    "--lock-duration-ms",
                    &LOCK_MS.to_string(),
                    "--mode",
                    mode,
                ]
                .map(String::from)
                .to_vec(),
                history.clone(),
            );
            let relays = (0..if o.v2 { relays } else { 0 })
                .map(|i| {
                    relay_proc(
                        &postbox_bin,
                        &format!("relay({service}#{i})"),
                        &url,
                        schema,
                        &redis.url(),
                        &o.relay_flags,
                        &history,
                    )
                })
                .collect();
            Ok(Service {
                svc,
                relays,
                port,
                url,
                schema: schema.to_owned(),
            })
        };
        let consumers = make("consumers", "workers", &cs, &ws, o.consumers_relays)?;
        let workers = make("workers", "consumers", &ws, &cs, 1)?;
        Ok(World {
            admin: sqlx::PgPool::connect(admin_url).await?,
            history,
            redis,
            consumers,
            workers,
            postbox_bin,
            v2: o.v2,
        })
    }

    /// Another relay process for the consumers schema (not started).
    pub fn new_consumers_relay(&self, name: &str, flags: &[String]) -> Proc {
        relay_proc(
            &self.postbox_bin,
            name,
            &self.consumers.url,
            &self.consumers.schema,
            &self.redis.url(),
            flags,
            &self.history,
        )
    }

    /// Send one message from consumers (see [`Sender::send`]).
    pub async fn send(&self, m: Msg) -> Result<(), chat::Error> {
        Sender {
            port: self.consumers.port,
            history: self.history.clone(),
        }
        .send(m)
        .await
    }

    /// Rows of the consumers outbox not yet sent (v2).
    pub async fn unsent(&self) -> Result<Option<i64>, chat::Error> {
        if !self.v2 {
            return Ok(None);
        }
        let n: i64 = sqlx::query_scalar(&format!(
            "SELECT count(*) FROM {}.outbox WHERE sent_at IS NULL",
            self.consumers.schema
        ))
        .fetch_one(&self.admin)
        .await?;
        Ok(Some(n))
    }

    /// Wait until everything saved is shown and the outbox is empty (or `timeout`).
    pub async fn converge(&self, timeout: Duration) -> Result<(), chat::Error> {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if self.history.verdict(None).lost.is_empty() && self.unsent().await?.unwrap_or(0) == 0
            {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Ok(())
    }

    /// Stop everything and drop the run's schemas and roles.
    pub async fn finish(mut self) -> Result<(), chat::Error> {
        let stop_c = self.consumers.stop().await;
        let stop_w = self.workers.stop().await;
        for s in [&self.consumers.schema, &self.workers.schema] {
            let _ = sqlx::raw_sql(&format!("DROP SCHEMA IF EXISTS {s} CASCADE; DROP OWNED BY chat_{s} CASCADE; DROP ROLE IF EXISTS chat_{s};"))
                .execute(&self.admin)
                .await;
        }
        stop_c.and(stop_w)
    }
}

fn relay_proc(
    bin: &std::path::Path,
    name: &str,
    url: &str,
    schema: &str,
    redis: &str,
    flags: &[String],
    history: &History,
) -> Proc {
    let mut args: Vec<String> = [
        "relay",
        "--database-url",
        url,
        "--schemas",
        schema,
        "--workers",
        "2",
        "--redis-url",
        redis,
        "--backoff-max",
        "500ms",
        "--publish-timeout",
        "2s",
        "--rebalance-interval",
        "300ms",
    ]
    .map(String::from)
    .to_vec();
    args.extend(flags.iter().cloned());
    Proc::new(name, bin.to_path_buf(), args, history.clone())
}

/// Sends messages from the consumers service and records them as saved.
#[derive(Clone)]
pub struct Sender {
    pub port: u16,
    pub history: History,
}

impl Sender {
    /// Send one message, retrying while the service is being deployed
    /// (connection refused), and record it as saved once the API says 201.
    pub async fn send(&self, m: Msg) -> Result<(), chat::Error> {
        let url = format!(
            "http://127.0.0.1:{}/api/chats/{}/messages",
            self.port, m.chat
        );
        let deadline = Instant::now() + Duration::from_secs(30);
        let body = serde_json::json!({ "body": m.body() }).to_string();
        self.history.push(Kind::Sending(m));
        loop {
            match Http.post_raw(&url, &body).await {
                Ok((201, _)) => break,
                Ok((status, answer)) => {
                    return Err(format!("{m} refused: HTTP {status} {answer}").into())
                }
                // Not listening (being deployed): the client tries again.
                Err(_) if Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(50)).await
                }
                Err(e) => return Err(format!("{m} could not be sent: {e}").into()),
            }
        }
        self.history.push(Kind::Saved(m));
        Ok(())
    }
}
