//! `postbox-bench`'s command line: the flags, their defaults (normal and
//! `--quick`), and their resolution into the [`Params`] every benchmark reads.

use crate::relay::{BenchRelay, RelayArgs};
use std::path::PathBuf;
use std::time::Duration;

/// Which benchmark to run.
#[derive(Clone, Copy, PartialEq, Eq, Debug, clap::ValueEnum)]
pub enum Which {
    /// Relay drain rate to each sink given (BullMQ always; Kafka, RabbitMQ, NATS, SQS with their flags; Redis Streams and webhooks) against SQL-only and each sink's raw rate (the same events through it without PostgreSQL).
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
    /// Two relays at `--rate`, one of them reaching Redis through a fault proxy, for each of `--unavailable-afters`: latency when that relay is cut off (`--cut-hold`), and its stand-bys and latency when its broker is only slow, against no fault.
    SickRelay,
    /// Live events' latency at `--rate` while `postbox replay` sends `--replay-events` retained events again at each `--replay-rates` pace, against no replay.
    Replay,
    /// The drain beside 1,000,000 scheduled events against none, and how late scheduled events are delivered.
    Scheduled,
    /// The operator console's pages and API at 1,000,000 outbox rows and 100,000 dead letters: p50/p95 against the same server answering without the database.
    Console,
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
    /// PostgreSQL URL (`DATABASE_URL` when `POSTBOX_DATABASE_URL` is unset).
    #[arg(
        long,
        env = "POSTBOX_DATABASE_URL",
        hide_env_values = true,
        default_value = "postgres://postgres:postgres@127.0.0.1:5432/postgres"
    )]
    database_url: String,
    /// Redis URL (`REDIS_URL` when `POSTBOX_REDIS_URL` is unset).
    #[arg(
        long,
        env = "POSTBOX_REDIS_URL",
        hide_env_values = true,
        default_value = "redis://127.0.0.1:6379"
    )]
    redis_url: String,
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
    /// The in-process relays' settings: fields of the relay's own.
    #[command(flatten)]
    relay: RelayArgs,
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
    /// Replay: sent rows retained and replayed [default: 1000000; --quick: 10000].
    #[arg(long)]
    replay_events: Option<u64>,
    /// Replay: `postbox replay --rate` paces: auto (the default, following the relay), or events a second, 0 for unlimited [default: auto,1000; --quick: auto].
    #[arg(long, value_delimiter = ',', value_parser = replay_pace)]
    replay_rates: Option<Vec<ReplayPace>>,
    /// Scheduled: events waiting to be due beside the drain [default: 1000000; --quick: 10000].
    #[arg(long)]
    scheduled_events: Option<u64>,
    /// Scheduled: events due over five seconds whose lateness is measured [default: 5000; --quick: 200].
    #[arg(long)]
    scheduled_due: Option<u64>,
    /// Sick relay: the relays' `unavailable_after` values measured in turn [default: 1s,2s,3s,5s,10s; --quick: 1s].
    #[arg(long, value_delimiter = ',', value_parser = parse_duration)]
    unavailable_afters: Option<Vec<Duration>>,
    /// Sick relay: how long one relay is cut off from Redis [default: 15s; --quick: 3s].
    #[arg(long, value_parser = parse_duration)]
    cut_hold: Option<Duration>,
    /// Sick relay: latency its proxy adds each way, 2 s of every 5 (a broker slow in bursts).
    #[arg(long, value_parser = parse_duration, default_value = "300ms")]
    burst_latency: Duration,
    /// Sick relay: latency its proxy adds each way for the whole run (a steadily slow broker).
    #[arg(long, value_parser = parse_duration, default_value = "1s")]
    steady_latency: Duration,
    /// Health, restart, replay and sick relay: (live) events per second.
    #[arg(long, default_value_t = 1000)]
    rate: u64,
    /// The table-health benchmark alone, for this long (same as `postbox-bench health --health-duration`).
    #[arg(long, value_parser = parse_duration, conflicts_with = "which")]
    table_health: Option<Duration>,
    /// Write every figure, with the parameters, core count and time, to this JSON file.
    #[arg(long)]
    pub(super) json: Option<PathBuf>,
    /// Render latency percentiles and throughput against baselines to this PNG file.
    #[arg(long)]
    pub(super) png: Option<PathBuf>,
}

/// The resolved, validated parameters every benchmark reads.
#[derive(Debug, Clone, serde::Serialize)]
pub(crate) struct Params {
    #[serde(skip)]
    pub(super) database_url: String,
    #[serde(skip)]
    pub(super) redis_url: String,
    pub(super) kafka_brokers: Option<String>,
    #[serde(skip)]
    pub(super) rabbitmq_url: Option<String>,
    #[serde(skip)]
    pub(super) nats_url: Option<String>,
    pub(super) sqs_endpoint_url: Option<String>,
    pub(super) sqs_region: String,
    pub(super) reps: usize,
    pub(super) events: i64,
    pub(super) keys: i64,
    /// The relay settings every in-process relay starts from.
    #[serde(flatten)]
    pub(super) relay: BenchRelay,
    pub(super) rates: Vec<u64>,
    #[serde(with = "humantime_serde")]
    pub(super) duration: Duration,
    #[serde(serialize_with = "durations")]
    pub(super) poll_intervals: Vec<Duration>,
    pub(super) producers: usize,
    #[serde(with = "humantime_serde")]
    pub(super) producer_duration: Duration,
    pub(super) load_producers: Vec<usize>,
    #[serde(with = "humantime_serde")]
    pub(super) load_duration: Duration,
    pub(super) jobs: usize,
    pub(super) concurrency: Vec<usize>,
    #[serde(with = "humantime_serde")]
    pub(super) health_duration: Duration,
    #[serde(with = "humantime_serde")]
    pub(super) health_every: Duration,
    pub(super) rate: u64,
    pub(super) replay_events: u64,
    pub(super) replay_rates: Vec<ReplayPace>,
    pub(super) scheduled_events: u64,
    pub(super) scheduled_due: u64,
    #[serde(serialize_with = "durations")]
    pub(super) unavailable_afters: Vec<Duration>,
    #[serde(with = "humantime_serde")]
    pub(super) cut_hold: Duration,
    #[serde(with = "humantime_serde")]
    pub(super) burst_latency: Duration,
    #[serde(with = "humantime_serde")]
    pub(super) steady_latency: Duration,
}

/// A `postbox replay --rate`: `auto` or events a second (0: unlimited).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReplayPace {
    Auto,
    Fixed(u64),
}

impl std::fmt::Display for ReplayPace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReplayPace::Auto => f.write_str("auto"),
            ReplayPace::Fixed(n) => write!(f, "{n}"),
        }
    }
}

impl serde::Serialize for ReplayPace {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

fn replay_pace(s: &str) -> Result<ReplayPace, String> {
    match s.trim() {
        "auto" => Ok(ReplayPace::Auto),
        n => n
            .parse()
            .map(ReplayPace::Fixed)
            .map_err(|_| format!("{s:?} is neither auto nor events a second")),
    }
}

fn durations<S: serde::Serializer>(v: &[Duration], s: S) -> Result<S::Ok, S::Error> {
    s.collect_seq(
        v.iter()
            .map(|d| humantime_serde::re::humantime::format_duration(*d).to_string()),
    )
}

impl Args {
    /// Fill in the defaults (normal or --quick) and refuse what cannot run.
    pub(super) fn resolve(&self) -> Result<(Vec<Which>, Params), String> {
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
                Which::SickRelay,
                Which::Replay,
                Which::Scheduled,
                Which::Health,
            ],
            (None, Some(w)) => vec![w],
        };
        let p = Params {
            database_url: self.database_url.clone(),
            redis_url: self.redis_url.clone(),
            kafka_brokers: self.kafka_brokers.clone().filter(|b| !b.is_empty()),
            rabbitmq_url: self.rabbitmq_url.clone().filter(|u| !u.is_empty()),
            nats_url: self.nats_url.clone().filter(|u| !u.is_empty()),
            sqs_endpoint_url: self.sqs_endpoint_url.clone().filter(|u| !u.is_empty()),
            sqs_region: self.sqs_region.clone(),
            reps: self.reps.unwrap_or(if q { 1 } else { 3 }),
            events: self.events.unwrap_or(if q { 2000 } else { 100_000 }),
            keys: self.keys,
            relay: self.relay.config()?,
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
            replay_events: self
                .replay_events
                .unwrap_or(if q { 10_000 } else { 1_000_000 }),
            replay_rates: self.replay_rates.clone().unwrap_or_else(|| {
                if q {
                    vec![ReplayPace::Auto]
                } else {
                    vec![ReplayPace::Auto, ReplayPace::Fixed(1000)]
                }
            }),
            scheduled_events: self
                .scheduled_events
                .unwrap_or(if q { 10_000 } else { 1_000_000 }),
            scheduled_due: self.scheduled_due.unwrap_or(if q { 200 } else { 5000 }),
            unavailable_afters: self.unavailable_afters.clone().unwrap_or_else(|| {
                let secs: &[u64] = if q { &[1] } else { &[1, 2, 3, 5, 10] };
                secs.iter().map(|s| Duration::from_secs(*s)).collect()
            }),
            cut_hold: self
                .cut_hold
                .unwrap_or(Duration::from_secs(if q { 3 } else { 15 })),
            burst_latency: self.burst_latency,
            steady_latency: self.steady_latency,
        };
        let at_least_one = [
            ("reps", p.reps > 0),
            ("events", p.events > 0),
            ("keys", p.keys > 0),
            ("batch-size", p.relay.batch_size > 0),
            ("workers", p.relay.workers > 0),
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
            ("replay-events", p.replay_events > 0),
            ("scheduled-events", p.scheduled_events > 0),
            ("scheduled-due", p.scheduled_due > 0),
            ("unavailable-afters", !p.unavailable_afters.is_empty()),
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
        nonzero("cut-hold", p.cut_hold)?;
        nonzero("burst-latency", p.burst_latency)?;
        nonzero("steady-latency", p.steady_latency)?;
        for d in &p.poll_intervals {
            nonzero("poll-intervals", *d)?;
        }
        // One message per millisecond-tick at most is what the latency producer schedules well.
        if let Some(r) = p.rates.iter().find(|r| **r > 100_000) {
            return Err(format!("--rates {r}: at most 100000 messages/s"));
        }
        p.relay.validate(&p.database_url)?;
        Ok((which, p))
    }
}

#[cfg(test)]
mod tests;
