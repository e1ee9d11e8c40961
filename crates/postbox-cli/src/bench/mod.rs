//! `postbox bench`: the benchmark suite (issue #7). Each figure is printed
//! next to a baseline measured in the same run, as a ratio, over several
//! repetitions (median, min–max), with the machine's core count.
//!
//! One file per benchmark: [`drain`] (relay drain rate), [`latency`] (producer
//! commit → consumer inbox commit), [`producer`] (cost of the outbox row to a
//! producer), [`consumer`] (inbox worker throughput), [`load`] (the whole
//! pipeline with producers flat out), [`restart`] (latency during a rolling
//! relay restart), [`health`] (outbox size under sustained load); [`parts`]
//! holds what several of them assemble, [`report`] prints the tables, writes
//! JSON and the PNG.

mod consumer;
mod cpu;
mod drain;
mod health;
mod latency;
mod load;
mod parts;
mod producer;
mod report;
mod restart;

pub(crate) use parts::{relay_ready, warm, InboxOnly, NullSink};

use crate::CliError;
use postbox::migrate::WakeUp;
use postbox::SchemaName;
use postbox_bullmq::bullmq::options::RedisConnectionOptions;
use postbox_bullmq::bullmq::{Queue, QueueOptions, WorkerOptions};
use postbox_relay::{Config, Secret};
use sqlx::PgPool;
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Duration;

/// Which benchmark to run.
#[derive(Clone, Copy, PartialEq, Eq, Debug, clap::ValueEnum)]
pub enum Which {
    /// Relay drain rate to each sink given (BullMQ always; Kafka, RabbitMQ, NATS, SQS with their flags; Redis Streams and webhooks) against SQL-only and raw broker writes.
    Drain,
    /// Producer commit → consumer inbox commit, per wake-up policy.
    Latency,
    /// Producer transactions per second with and without the outbox row.
    Producer,
    /// Inbox worker jobs/s against a no-op worker.
    Consumer,
    /// Outbox size and dead tuples under sustained load with retention on.
    Health,
    /// Producers flat out for `--load-duration` with a relay and an inbox consumer running: produced/s, delivered/s, backlog, latency.
    Load,
    /// Producer commit → consumer inbox commit at `--rate` while two relays are restarted in turn, against the same relays left alone.
    Restart,
    /// Every benchmark, health included.
    All,
}

fn parse_duration(s: &str) -> Result<Duration, String> {
    humantime_serde::re::humantime::parse_duration(s).map_err(|e| e.to_string())
}

#[derive(clap::Args)]
pub struct Args {
    /// Benchmark to run; without one: drain, latency, producer and consumer.
    #[arg(value_enum)]
    which: Option<Which>,
    #[command(flatten)]
    services: crate::services::Services,
    /// Kafka bootstrap servers for the drain benchmark's Kafka rows (skipped without).
    #[arg(long)]
    kafka_brokers: Option<String>,
    /// AMQP URL for the drain benchmark's RabbitMQ rows (skipped without).
    #[arg(long, env = "RABBITMQ_URL", hide_env_values = true)]
    rabbitmq_url: Option<String>,
    /// SQS endpoint for the drain benchmark's SQS rows (a local SQS-compatible
    /// server, or `https://sqs.<region>.amazonaws.com`; credentials from the
    /// standard AWS chain; skipped without).
    #[arg(long)]
    sqs_endpoint_url: Option<String>,
    /// AWS region of the SQS rows.
    #[arg(long, default_value = "us-east-1")]
    sqs_region: String,
    /// NATS URL for the drain benchmark's JetStream rows (skipped without).
    #[arg(long, env = "NATS_URL", hide_env_values = true)]
    nats_url: Option<String>,
    /// Small sizes and short durations (a smoke run, e.g. for tests); explicit flags still win.
    #[arg(long)]
    quick: bool,
    /// Repetitions of each measurement [default: 3; --quick: 1].
    #[arg(long)]
    reps: Option<usize>,
    /// Drain: events pre-filled per run [default: 100000; --quick: 2000].
    #[arg(long)]
    events: Option<i64>,
    /// Drain: ordering keys the events are spread over.
    #[arg(long, default_value_t = 64)]
    keys: i64,
    /// Relay batch size.
    #[arg(long, default_value_t = 1000)]
    batch_size: i64,
    /// Relay workers.
    #[arg(long, default_value_t = 4)]
    workers: usize,
    /// Relay: how soon a worker claims again after a pass that found events
    /// [default: the relay's `busy_poll_interval`].
    #[arg(long, value_parser = parse_duration)]
    busy_poll_interval: Option<Duration>,
    /// Relay: how long its workers keep up before one takes all their
    /// partitions (`0s`: never) [default: the relay's `consolidate_after`].
    #[arg(long, value_parser = parse_duration)]
    consolidate_after: Option<Duration>,
    /// Relay: workers that claim while the relay keeps up [default: the
    /// relay's `keeping_up_workers`].
    #[arg(long)]
    keeping_up_workers: Option<usize>,
    /// Latency: producer rates in messages/s [default: 100,1000].
    #[arg(long, value_delimiter = ',')]
    rates: Option<Vec<u64>>,
    /// Latency and restart: how long each rate is held [default: 30s; --quick: 1s].
    #[arg(long, value_parser = parse_duration)]
    duration: Option<Duration>,
    /// Latency: relay poll intervals measured with `notify = off` [default: 1s,50ms].
    #[arg(long, value_delimiter = ',', value_parser = parse_duration)]
    poll_intervals: Option<Vec<Duration>>,
    /// Producer: concurrent producer connections.
    #[arg(long, default_value_t = 16)]
    producers: usize,
    /// Producer: how long each variant runs [default: 10s; --quick: 1s].
    #[arg(long, value_parser = parse_duration)]
    producer_duration: Option<Duration>,
    /// Load: producer counts, each run in turn [default: 4,16].
    #[arg(long, value_delimiter = ',')]
    load_producers: Option<Vec<usize>>,
    /// Load: how long the producers write [default: 10s; --quick: 1s].
    #[arg(long, value_parser = parse_duration)]
    load_duration: Option<Duration>,
    /// Consumer: jobs pre-filled per run [default: 20000; --quick: 1000].
    #[arg(long)]
    jobs: Option<usize>,
    /// Consumer: worker concurrencies [default: 1,8,32].
    #[arg(long, value_delimiter = ',')]
    concurrency: Option<Vec<usize>>,
    /// Health: how long to produce [default: 10m; --quick: 3s].
    #[arg(long, value_parser = parse_duration)]
    health_duration: Option<Duration>,
    /// Health: report interval [default: 1m; --quick: 1s].
    #[arg(long, value_parser = parse_duration)]
    health_every: Option<Duration>,
    /// Health and restart: events per second.
    #[arg(long, default_value_t = 1000)]
    rate: u64,
    /// The table-health benchmark alone, for this long (same as `bench health --health-duration`).
    #[arg(long, value_parser = parse_duration, conflicts_with = "which")]
    table_health: Option<Duration>,
    /// Write every figure, with the parameters, core count and time, to this JSON file.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Render latency percentiles and throughput against baselines to this PNG file.
    #[arg(long)]
    png: Option<PathBuf>,
}

/// The resolved, validated parameters every benchmark reads.
#[derive(Debug, Clone, serde::Serialize)]
pub(crate) struct Params {
    #[serde(skip)]
    database_url: String,
    #[serde(skip)]
    redis_url: String,
    kafka_brokers: Option<String>,
    #[serde(skip)]
    rabbitmq_url: Option<String>,
    #[serde(skip)]
    nats_url: Option<String>,
    sqs_endpoint_url: Option<String>,
    sqs_region: String,
    reps: usize,
    events: i64,
    keys: i64,
    batch_size: i64,
    workers: usize,
    #[serde(with = "humantime_serde")]
    busy_poll_interval: Duration,
    #[serde(with = "humantime_serde")]
    consolidate_after: Duration,
    keeping_up_workers: usize,
    rates: Vec<u64>,
    #[serde(with = "humantime_serde")]
    duration: Duration,
    #[serde(serialize_with = "durations")]
    poll_intervals: Vec<Duration>,
    producers: usize,
    #[serde(with = "humantime_serde")]
    producer_duration: Duration,
    load_producers: Vec<usize>,
    #[serde(with = "humantime_serde")]
    load_duration: Duration,
    jobs: usize,
    concurrency: Vec<usize>,
    #[serde(with = "humantime_serde")]
    health_duration: Duration,
    #[serde(with = "humantime_serde")]
    health_every: Duration,
    rate: u64,
}

fn durations<S: serde::Serializer>(v: &[Duration], s: S) -> Result<S::Ok, S::Error> {
    s.collect_seq(
        v.iter()
            .map(|d| humantime_serde::re::humantime::format_duration(*d).to_string()),
    )
}

impl Args {
    /// Fill in the defaults (normal or --quick) and refuse what cannot run.
    fn resolve(&self) -> Result<(Vec<Which>, Params), String> {
        let q = self.quick;
        let which = match (self.table_health, self.which) {
            (Some(_), _) | (None, Some(Which::Health)) => vec![Which::Health],
            (None, None) => vec![
                Which::Drain,
                Which::Latency,
                Which::Producer,
                Which::Consumer,
            ],
            (None, Some(Which::All)) => vec![
                Which::Drain,
                Which::Latency,
                Which::Producer,
                Which::Consumer,
                Which::Load,
                Which::Restart,
                Which::Health,
            ],
            (None, Some(w)) => vec![w],
        };
        let p = Params {
            database_url: self.services.database_url.clone(),
            redis_url: self.services.redis_url.clone(),
            kafka_brokers: self.kafka_brokers.clone().filter(|b| !b.is_empty()),
            rabbitmq_url: self.rabbitmq_url.clone().filter(|u| !u.is_empty()),
            nats_url: self.nats_url.clone().filter(|u| !u.is_empty()),
            sqs_endpoint_url: self.sqs_endpoint_url.clone().filter(|u| !u.is_empty()),
            sqs_region: self.sqs_region.clone(),
            reps: self.reps.unwrap_or(if q { 1 } else { 3 }),
            events: self.events.unwrap_or(if q { 2000 } else { 100_000 }),
            keys: self.keys,
            batch_size: self.batch_size,
            workers: self.workers,
            busy_poll_interval: self
                .busy_poll_interval
                .unwrap_or(Config::default().busy_poll_interval),
            consolidate_after: self
                .consolidate_after
                .unwrap_or(Config::default().consolidate_after),
            keeping_up_workers: self
                .keeping_up_workers
                .unwrap_or(Config::default().keeping_up_workers),
            rates: self.rates.clone().unwrap_or_else(|| vec![100, 1000]),
            duration: self
                .duration
                .unwrap_or(Duration::from_secs(if q { 1 } else { 30 })),
            poll_intervals: self
                .poll_intervals
                .clone()
                .unwrap_or_else(|| vec![Duration::from_secs(1), Duration::from_millis(50)]),
            producers: self.producers,
            producer_duration: self.producer_duration.unwrap_or(Duration::from_secs(if q {
                1
            } else {
                10
            })),
            load_producers: self.load_producers.clone().unwrap_or_else(|| vec![4, 16]),
            load_duration: self.load_duration.unwrap_or(Duration::from_secs(if q {
                1
            } else {
                10
            })),
            jobs: self.jobs.unwrap_or(if q { 1000 } else { 20_000 }),
            concurrency: self.concurrency.clone().unwrap_or_else(|| vec![1, 8, 32]),
            health_duration: self.table_health.or(self.health_duration).unwrap_or(if q {
                Duration::from_secs(3)
            } else {
                Duration::from_secs(600)
            }),
            health_every: self
                .health_every
                .unwrap_or(Duration::from_secs(if q { 1 } else { 60 })),
            rate: self.rate,
        };
        let at_least_one = [
            ("reps", p.reps > 0),
            ("events", p.events > 0),
            ("keys", p.keys > 0),
            ("batch-size", p.batch_size > 0),
            ("workers", p.workers > 0),
            (
                "rates",
                !p.rates.is_empty() && p.rates.iter().all(|r| *r > 0),
            ),
            ("producers", p.producers > 0),
            (
                "load-producers",
                !p.load_producers.is_empty() && p.load_producers.iter().all(|n| *n > 0),
            ),
            ("jobs", p.jobs > 0),
            (
                "concurrency",
                !p.concurrency.is_empty() && p.concurrency.iter().all(|c| *c > 0),
            ),
            ("rate", p.rate > 0),
        ];
        if let Some((name, _)) = at_least_one.iter().find(|(_, ok)| !ok) {
            return Err(format!("--{name} must be at least 1"));
        }
        let nonzero = |name: &str, d: Duration| {
            if d.is_zero() {
                Err(format!("--{name} must be longer than 0"))
            } else {
                Ok(())
            }
        };
        nonzero("duration", p.duration)?;
        nonzero("producer-duration", p.producer_duration)?;
        nonzero("load-duration", p.load_duration)?;
        nonzero("health-duration", p.health_duration)?;
        nonzero("health-every", p.health_every)?;
        for d in &p.poll_intervals {
            nonzero("poll-intervals", *d)?;
        }
        // One message per millisecond-tick at most is what the latency producer schedules well.
        if let Some(r) = p.rates.iter().find(|r| **r > 100_000) {
            return Err(format!("--rates {r}: at most 100000 messages/s"));
        }
        Ok((which, p))
    }
}

pub async fn run(a: Args) -> Result<(), CliError> {
    let (which, params) = a.resolve()?;
    let pool = PgPool::connect(&params.database_url).await.map_err(|e| {
        format!(
            "cannot connect to PostgreSQL at {}: {e}",
            Secret::new(params.database_url.clone())
        )
    })?;
    let ctx = Ctx {
        cores: std::thread::available_parallelism().map_or(0, |n| n.get()),
        tag: format!("postbox_bench_{}", std::process::id()),
        p: params,
        pool,
        schemas: Mutex::new(Vec::new()),
        queues: Mutex::new(Vec::new()),
    };
    let mut rep = report::Report::new(&ctx);
    println!(
        "postbox bench {}: {} cores, {} repetitions, {}",
        which
            .iter()
            .map(|w| format!("{w:?}").to_lowercase())
            .collect::<Vec<_>>()
            .join(", "),
        ctx.cores,
        ctx.p.reps,
        rep.timestamp
    );
    let result = run_all(&ctx, &which, &mut rep).await;
    // Whatever happened, leave no bench schema or queue behind.
    ctx.cleanup().await;
    result?;
    if let Some(path) = &a.json {
        rep.write_json(path)?;
        println!("\nfigures: {}", path.display());
    }
    if let Some(path) = &a.png {
        rep.draw(path)?;
        println!("chart: {}", path.display());
    }
    Ok(())
}

async fn run_all(ctx: &Ctx, which: &[Which], rep: &mut report::Report) -> Result<(), CliError> {
    for w in which {
        println!();
        match w {
            Which::Drain => rep.drain = Some(drain::run(ctx).await?),
            Which::Latency => rep.latency = Some(latency::run(ctx).await?),
            Which::Producer => rep.producer = Some(producer::run(ctx).await?),
            Which::Consumer => rep.consumer = Some(consumer::run(ctx).await?),
            Which::Health => rep.health = Some(health::run(ctx).await?),
            Which::Load => rep.load = Some(load::run(ctx).await?),
            Which::Restart => rep.restart = Some(restart::run(ctx).await?),
            Which::All => unreachable!("expanded by resolve"),
        }
    }
    Ok(())
}

/// What every benchmark shares: parameters, the pool, and the names it
/// created, so that they are all removed at the end even after an error.
pub(crate) struct Ctx {
    pub p: Params,
    pub pool: PgPool,
    pub cores: usize,
    /// `postbox_bench_<pid>`: prefix of every schema and queue of this run.
    tag: String,
    schemas: Mutex<Vec<SchemaName>>,
    queues: Mutex<Vec<String>>,
}

impl Ctx {
    /// A new migrated schema `postbox_bench_<pid>_<what>` with the given wake-up policy.
    pub async fn schema(&self, what: &str, notify: WakeUp) -> Result<SchemaName, CliError> {
        let schema = SchemaName::new(&format!("{}_{what}", self.tag))?;
        sqlx::raw_sql(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE"))
            .execute(&self.pool)
            .await?;
        self.schemas.lock().unwrap().push(schema.clone());
        let mut conn = self.pool.acquire().await?;
        postbox::migrate::run(&mut conn, &schema, notify).await?;
        Ok(schema)
    }

    /// Drop a schema made by [`Ctx::schema`] now (between repetitions).
    pub async fn drop_schema(&self, schema: &SchemaName) -> Result<(), CliError> {
        sqlx::raw_sql(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE"))
            .execute(&self.pool)
            .await?;
        self.schemas.lock().unwrap().retain(|s| s != schema);
        Ok(())
    }

    /// A name of this run for a queue or topic: `postbox-bench-<pid>-<what>`.
    pub fn name(&self, what: &str) -> String {
        format!("{}-{what}", self.tag.replace('_', "-"))
    }

    /// A BullMQ queue name of this run, obliterated at the end.
    pub fn queue_name(&self, what: &str) -> String {
        let name = self.name(what);
        self.queues.lock().unwrap().push(name.clone());
        name
    }

    pub fn redis(&self) -> RedisConnectionOptions {
        RedisConnectionOptions {
            url: self.p.redis_url.clone(),
            ..Default::default()
        }
    }

    pub async fn queue(&self, name: &str) -> Result<Queue, CliError> {
        let opts = QueueOptions {
            connection: self.redis(),
            ..Default::default()
        };
        Ok(Queue::with_options(name, opts).await?)
    }

    pub fn worker_options(&self, concurrency: usize) -> WorkerOptions {
        WorkerOptions {
            connection: self.redis(),
            concurrency,
            ..Default::default()
        }
    }

    /// Remove a queue's jobs from Redis now (between repetitions, to free memory).
    pub async fn obliterate(&self, name: &str) -> Result<(), CliError> {
        let q = self.queue(name).await?;
        // The script deletes up to `count` keys a call and fails while more remain.
        for _ in 0..10_000 {
            if q.obliterate(true, 5000).await.is_ok() {
                self.queues.lock().unwrap().retain(|n| n != name);
                return Ok(());
            }
        }
        Err(format!("cannot obliterate BullMQ queue {name}").into())
    }

    /// Relay settings for `schema` with this run's workers and batch size.
    pub fn relay_config(&self, schema: &SchemaName, poll_interval: Duration) -> Config {
        Config {
            database_url: Secret::new(self.p.database_url.clone()),
            schemas: vec![schema.to_string()],
            workers: self.p.workers,
            batch_size: self.p.batch_size,
            poll_interval,
            busy_poll_interval: self.p.busy_poll_interval,
            consolidate_after: self.p.consolidate_after,
            keeping_up_workers: self.p.keeping_up_workers,
            ..Default::default()
        }
    }

    async fn cleanup(&self) {
        let schemas = std::mem::take(&mut *self.schemas.lock().unwrap());
        for s in schemas {
            if let Err(e) = self.drop_schema(&s).await {
                eprintln!("warning: cannot drop bench schema {s}: {e}");
            }
        }
        let queues = std::mem::take(&mut *self.queues.lock().unwrap());
        for q in queues {
            if let Err(e) = self.obliterate(&q).await {
                eprintln!("warning: {e}");
            }
        }
    }
}
