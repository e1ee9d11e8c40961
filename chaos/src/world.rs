//! A running chat system for one scenario: its own Redis (and, over another
//! broker, its own RabbitMQ node or NATS server), per-run schemas and roles,
//! both services and their relays, all real processes.

use crate::brokers::Node;
use crate::history::{History, Msg};
use crate::infra::{free_port, sibling, Proc, Redis};
pub use crate::sender::Sender;
use chat::http::Http;
use chat::setup::{role_for, service_url, SetupArgs};
use postbox::SchemaName;
use postbox_testkit::{PgBouncer, Proxy};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// The password of the run's service roles.
const ROLE_PASSWORD: &str = "chat";

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
    /// BullMQ's Redis (started for every world: the fault scenarios use it).
    pub redis: Redis,
    /// The broker, when it is not BullMQ.
    pub node: Option<Node>,
    /// Between the services/relays and Redis, if [`Options::redis_proxy`].
    pub proxy: Option<Proxy>,
    pub consumers: Service,
    pub workers: Service,
    pub admin: sqlx::PgPool,
    postbox_bin: PathBuf,
    /// Between the first consumers relay and PostgreSQL, if [`Options::pg_proxy`].
    pub pg_proxy: Option<Proxy>,
    /// Between the first consumers relays and Redis, if [`Options::relay_redis_proxy`].
    pub relay_proxy: Option<Proxy>,
    /// Between the services and relays and PostgreSQL, if [`Options::pooler`].
    pub poolers: Option<Poolers>,
    /// The broker flags of the relays (the Redis URL is the proxy's, if any).
    relay_broker_args: Vec<String>,
    sender: Sender,
    v2: bool,
}

/// The PgBouncers of [`Options::pooler`].
pub struct Poolers {
    /// Transaction mode, a small pool: the services' URL.
    pub services: PgBouncer,
    /// Session mode: the relays' URL.
    pub relays: PgBouncer,
}

/// How to build a world.
#[derive(Default)]
pub struct Options {
    /// postbox (true) or the naive dual write (false).
    pub v2: bool,
    /// Relay processes for the consumers schema (v2).
    pub consumers_relays: usize,
    /// Extra flags for every relay.
    pub relay_flags: Vec<String>,
    /// Route the services' and relays' Redis connections through a fault
    /// [`Proxy`] (the harness itself still talks to Redis directly).
    pub redis_proxy: bool,
    /// Route the first consumers relay's PostgreSQL sessions through a fault
    /// [`Proxy`] (everything else talks to PostgreSQL directly).
    pub pg_proxy: bool,
    /// Route the Redis connections of the first this many consumers relays
    /// (BullMQ) through a fault [`Proxy`] of their own (the services, the
    /// other relays and the harness talk to Redis directly).
    pub relay_redis_proxy: usize,
    /// Route the services' sessions through PgBouncer in transaction mode
    /// (they run with `--statements unnamed`) and the relays' through
    /// PgBouncer in session mode, as a hosted database's pooled and session
    /// URLs (the harness itself talks to PostgreSQL directly).
    pub pooler: bool,
    /// Give the services and relays this libpq host list instead of the
    /// admin URL's host, with `target_session_attrs=read-write` (failover).
    pub db_hosts: Option<String>,
    /// The broker between the services (BullMQ by default).
    pub broker: chat::service::Broker,
    /// Run this service with its Node.js implementation (BullMQ, v2).
    pub node: Option<chat::node::Service>,
}

impl World {
    pub async fn start(admin_url: &str, o: Options) -> Result<World, chat::Error> {
        let history = History::new();
        let chat_bin = sibling("chat")?;
        let postbox_bin = sibling("postbox")?;
        let redis = Redis::start(history.clone()).await?;
        let node = Node::start(o.broker).await;
        let proxy = if o.redis_proxy {
            Some(Proxy::start(([127, 0, 0, 1], redis.port).into()).await?)
        } else {
            None
        };
        let redis_url = match &proxy {
            Some(p) => format!("redis://127.0.0.1:{}", p.port()),
            None => redis.url(),
        };
        let pg_proxy = if o.pg_proxy {
            let u = url::Url::parse(admin_url).map_err(|e| format!("admin URL: {e}"))?;
            let addr = tokio::net::lookup_host((
                u.host_str().unwrap_or("127.0.0.1"),
                u.port().unwrap_or(5432),
            ))
            .await?
            .next()
            .ok_or("admin URL: host does not resolve")?;
            Some(Proxy::start(addr).await?)
        } else {
            None
        };
        let pg_proxy_port = pg_proxy.as_ref().map(|p| p.port());
        let broker_args = Node::broker_args(node.as_ref(), &redis_url);
        let (service_broker_args, relay_broker_args) =
            (broker_args.serve_args(), Node::relay_args(&broker_args));
        let relay_proxy = if o.relay_redis_proxy > 0 {
            if node.is_some() {
                return Err("relay_redis_proxy: the broker is BullMQ's Redis only".into());
            }
            Some(Proxy::start(([127, 0, 0, 1], redis.port).into()).await?)
        } else {
            None
        };
        let proxied_relay_broker_args = relay_proxy.as_ref().map(|p| {
            Node::relay_args(&Node::broker_args(
                None,
                &format!("redis://127.0.0.1:{}", p.port()),
            ))
        });
        let sfx = &uuid::Uuid::new_v4().simple().to_string()[..8];
        let (cs, ws) = (
            format!("chaos_{sfx}_consumers"),
            format!("chaos_{sfx}_workers"),
        );
        chat::setup::run(SetupArgs {
            admin_url: admin_url.to_owned(),
            schemas: vec![cs.clone(), ws.clone()],
            role_password: ROLE_PASSWORD.into(),
            reset: true,
        })
        .await?;
        let poolers = if o.pooler {
            let roles = [
                role_for(&SchemaName::new(&cs)?),
                role_for(&SchemaName::new(&ws)?),
            ];
            let users = roles.each_ref().map(|r| (r.as_str(), ROLE_PASSWORD));
            Some(Poolers {
                services: PgBouncer::start_for(admin_url, "transaction", 4, &users).await,
                relays: PgBouncer::start_for(admin_url, "session", 16, &users).await,
            })
        } else {
            None
        };
        let mode = if o.v2 { "v2" } else { "v1" };
        let make = |service: &str,
                    peer: &str,
                    schema: &str,
                    peer_schema: &str,
                    relays: usize|
         -> Result<Service, chat::Error> {
            let mut url = service_url(admin_url, &SchemaName::new(schema)?, ROLE_PASSWORD)?;
            if let Some(hosts) = &o.db_hosts {
                url = with_hosts(&url, hosts)?;
            }
            // Behind the transaction pooler, unnamed statements (the Node
            // service's `pg` sends those anyway, and takes no such flag).
            let (service_db, statements) = match &poolers {
                Some(p) => (
                    via(&url, p.services.port()),
                    vec!["--statements".to_owned(), "unnamed".to_owned()],
                ),
                None => (url.clone(), vec![]),
            };
            let port = free_port();
            let args: Vec<String> = [
                "--service",
                service,
                "--peer",
                peer,
                "--schema",
                schema,
                "--peer-schema",
                peer_schema,
                "--database-url",
                &service_db,
                "--listen",
                &format!("127.0.0.1:{port}"),
                "--lock-duration-ms",
                &LOCK_MS.to_string(),
                "--mode",
                mode,
            ]
            .map(String::from)
            .into_iter()
            .chain(statements)
            .chain(service_broker_args.iter().cloned())
            .collect();
            let (program, args) = chat::node::service_command(o.node, service, &chat_bin, args);
            let svc = Proc::new(service, program, args, history.clone());
            let relays = (0..if o.v2 { relays } else { 0 })
                .map(|i| {
                    let url = match (pg_proxy_port, &poolers) {
                        (Some(port), _) if i == 0 && service == "consumers" => via(&url, port),
                        (_, Some(p)) => via(&url, p.relays.port()),
                        _ => url.clone(),
                    };
                    let broker = match &proxied_relay_broker_args {
                        Some(args) if i < o.relay_redis_proxy && service == "consumers" => args,
                        _ => &relay_broker_args,
                    };
                    relay_proc(
                        &postbox_bin,
                        &format!("relay({service}#{i})"),
                        &url,
                        schema,
                        broker,
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
            sender: Sender::new(consumers.port, history.clone()),
            history,
            redis,
            node,
            proxy,
            pg_proxy,
            relay_proxy,
            poolers,
            consumers,
            workers,
            postbox_bin,
            relay_broker_args,
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
            &self.relay_broker_args,
            flags,
            &self.history,
        )
    }

    /// Take the broker down (a clean stop), whichever it is.
    pub async fn broker_down(&mut self) -> Result<(), chat::Error> {
        match &mut self.node {
            Some(n) => {
                n.down();
                Ok(())
            }
            None => self.redis.down().await,
        }
    }

    /// Bring the broker back.
    pub async fn broker_up(&mut self) -> Result<(), chat::Error> {
        match &mut self.node {
            Some(n) => {
                n.up().await;
                Ok(())
            }
            None => self.redis.up().await,
        }
    }

    /// Send one message from consumers (see [`Sender::send`]).
    pub async fn send(&self, m: Msg) -> Result<Msg, chat::Error> {
        self.sender.send(m).await
    }

    /// The consumers' sender (shares this world's message numbering).
    pub fn sender(&self) -> Sender {
        self.sender.clone()
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

    /// The rows of the consumers outbox not yet sent, one line each (for a
    /// verdict that found some: which rows, of which writer, since when).
    pub async fn unsent_rows(&self) -> Result<String, chat::Error> {
        let rows: Vec<String> = sqlx::query_scalar(&format!(
            "SELECT format('  unsent row id %s xid %s topic %s key %s created %s ago, attempts %s, next attempt %s',
                           id, xid, topic, key, clock_timestamp() - created_at, attempts, next_attempt_at)
               FROM {}.outbox WHERE sent_at IS NULL ORDER BY id LIMIT 20",
            self.consumers.schema
        ))
        .fetch_all(&self.admin)
        .await?;
        Ok(rows.into_iter().map(|r| r + "\n").collect())
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
        // Judged as it stands; say that it did not settle, for the timeline.
        println!(
            "converge: not settled after {timeout:?}: {} lost so far, {} unsent in the outbox",
            self.history.verdict(None).lost.len(),
            self.unsent()
                .await?
                .map_or("n/a".to_owned(), |u| u.to_string())
        );
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
    broker: &[String],
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
        "--backoff-max",
        "500ms",
        "--publish-timeout",
        "2s",
        "--rebalance-interval",
        "300ms",
    ]
    .map(String::from)
    .to_vec();
    args.extend(broker.iter().cloned());
    args.extend(flags.iter().cloned());
    Proc::new(name, bin.to_path_buf(), args, history.clone())
}

/// `url` to 127.0.0.1:`port` instead (a proxy or pooler in front of its server).
fn via(url: &str, port: u16) -> String {
    let mut u = url::Url::parse(url).expect("a URL");
    let _ = u.set_host(Some("127.0.0.1"));
    let _ = u.set_port(Some(port));
    u.to_string()
}

/// `url` with its `host:port` replaced by a libpq host list, asking for a
/// writable server (sqlx's URL type cannot hold several hosts; postbox's
/// `Servers` reads them).
fn with_hosts(url: &str, hosts: &str) -> Result<String, chat::Error> {
    let u = url::Url::parse(url).map_err(|e| format!("service URL: {e}"))?;
    let one = format!(
        "@{}:{}",
        u.host_str().unwrap_or_default(),
        u.port().unwrap_or(5432)
    );
    let sep = if u.query().is_some() { '&' } else { '?' };
    Ok(format!(
        "{}{sep}target_session_attrs=read-write",
        url.replacen(&one, &format!("@{hosts}"), 1)
    ))
}
