//! Named fault scenarios beyond the seed, one file each, all under the same
//! load and judged by the same checker: lost, unexpected, duplicated
//! deliveries, reordered within a chat, unsent in the outbox — all must be
//! zero. A scenario says what its world needs ([`Setup`]), injects its faults
//! while the load runs ([`Scenario::faults`]), and may check more once the
//! chats have converged ([`Scenario::judge`]).

mod backlog_1m;
mod broker_cut_one_relay;
mod broker_down_all_relays;
mod horizon;
mod measure;
mod pg_failover;
mod pg_immediate_stop;
mod pg_partition;
mod pg_read_only;
mod pg_terminate;
mod poison;
mod pooler;
mod redis_hang;
mod redis_kill;
mod redis_latency;
mod redis_partition;
mod relay_kill;
mod relay_stop_takeover;
mod rolling_deploy;
mod worker_stall;

use crate::history::{Kind, Verdict};
use crate::pg::sync_standby;
use crate::world::{Options, Sender, World};
use postbox_testkit::PgCluster;
use std::time::{Duration, Instant};

/// One named fault scenario.
#[async_trait::async_trait]
pub trait Scenario: Sync {
    /// The name `chaos run` takes.
    fn name(&self) -> &'static str;
    /// One line for `chaos list`.
    fn about(&self) -> &'static str;
    /// What its world needs besides one relay per schema on the shared server.
    fn setup(&self) -> Setup {
        Setup::default()
    }
    /// The faults, while the load runs ([`Run::at`] times them).
    async fn faults(&self, run: &mut Run) -> Result<(), chat::Error>;
    /// Checks of its own once the chats have converged, before the checker's;
    /// false fails the scenario.
    async fn judge(&self, _run: &Run) -> Result<bool, chat::Error> {
        Ok(true)
    }
    /// How long it holds its fault when `--hold` is not given; `fast`: when
    /// run as part of `chaos run fast`.
    fn default_hold(&self, _fast: bool) -> Duration {
        Duration::from_secs(30)
    }
    /// How long the chats' load runs, for a fault held `hold`.
    fn load(&self, _hold: Duration) -> Duration {
        LOAD
    }
}

/// Every scenario, in the order `chaos list` shows them.
pub const ALL: &[&dyn Scenario] = &[
    &relay_kill::RelayKill,
    &relay_stop_takeover::RelayStopTakeover,
    &rolling_deploy::RollingDeploy,
    &redis_kill::RedisKill,
    &redis_hang::RedisHang,
    &pg_terminate::PgTerminate,
    &worker_stall::WorkerStall,
    &poison::Poison,
    &redis_partition::RedisPartition,
    &redis_latency::RedisLatency,
    &pg_immediate_stop::PgImmediateStop,
    &pg_read_only::PgReadOnly,
    &backlog_1m::Backlog1m,
    &pg_failover::PgFailover,
    &horizon::LongSnapshot,
    &horizon::IdleWriter,
    &pg_partition::PgPartition,
    &pooler::Pooler,
    &broker_cut_one_relay::BrokerCutOneRelay,
    &broker_down_all_relays::BrokerDownAllRelays,
];

/// The fast subset CI runs next to the seed scenario.
pub const FAST: &[&str] = &[
    "relay-kill",
    "redis-kill",
    "pg-terminate",
    "poison",
    "redis-partition",
    "pg-immediate-stop",
    "pg-partition",
    "pg-failover",
    "pooler",
    "broker-cut-one-relay",
    "broker-down-all-relays",
];

/// What a scenario's world needs.
pub struct Setup {
    /// Relay processes for the consumers schema.
    pub relays: usize,
    /// Extra flags for every relay.
    pub relay_flags: Vec<String>,
    /// Which PostgreSQL the world runs on.
    pub postgres: Postgres,
    /// See [`Options::redis_proxy`].
    pub redis_proxy: bool,
    /// See [`Options::pg_proxy`].
    pub pg_proxy: bool,
    /// See [`Options::pooler`].
    pub pooler: bool,
    /// See [`Options::relay_redis_proxy`].
    pub relay_redis_proxy: usize,
    /// Chats the load goes round (the chat seeds 1..=3; more are added to
    /// the consumers' schema before the load starts).
    pub chats: i64,
}

impl Default for Setup {
    fn default() -> Self {
        Setup {
            relays: 1,
            relay_flags: Vec::new(),
            postgres: Postgres::Shared,
            redis_proxy: false,
            pg_proxy: false,
            pooler: false,
            relay_redis_proxy: 0,
            chats: CHATS,
        }
    }
}

/// Which PostgreSQL a world runs on.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Postgres {
    /// The admin URL's server, shared with everything else.
    Shared,
    /// A cluster of the scenario's own, which it may stop hard.
    Own,
    /// A cluster of its own with a synchronous streaming standby.
    WithStandby,
}

/// A scenario under way: its world, and what it may fault.
pub struct Run {
    pub w: World,
    /// The cluster of [`Postgres::Own`] and [`Postgres::WithStandby`].
    pub cluster: Option<PgCluster>,
    /// The standby of [`Postgres::WithStandby`].
    pub standby: Option<PgCluster>,
    /// `--hold`, for the scenarios that hold a transaction or a fault.
    pub hold: Duration,
    /// When the load started.
    t0: Instant,
    /// How long the load runs ([`Scenario::load`]).
    load: Duration,
    /// A window (seconds on the history's clock) where answers other than
    /// 201 are expected; outside it, every answer must be a 201.
    pub outage: Option<(f64, f64)>,
    /// False once a check made during the faults failed.
    pub ok: bool,
    /// What [`Scenario::faults`] measured for its [`Scenario::judge`].
    pub measured: Option<Box<dyn std::any::Any + Send + Sync>>,
}

impl Run {
    /// Sleep until `secs` after the load started.
    pub async fn at(&self, secs: f64) {
        tokio::time::sleep_until((self.t0 + Duration::from_secs_f64(secs)).into()).await;
    }

    /// Whether the load is still running.
    pub fn loading(&self) -> bool {
        self.t0.elapsed() < self.load
    }

    /// Wait until the load has run its course.
    pub async fn loaded(&self) {
        tokio::time::sleep_until((self.t0 + self.load).into()).await;
    }

    /// The run's history.
    pub fn history(&self) -> crate::history::History {
        self.w.history.clone()
    }
}

const CHATS: i64 = 3; // the chat seeds chats 1..=3
const RATE: u64 = 40; // messages per second
const LOAD: Duration = Duration::from_secs(6);

/// Send messages round-robin over the chats at RATE for `duration`; each
/// chat's messages are sent one after the other, so their order is causal.
pub async fn load(sender: Sender, duration: Duration) -> Result<(), chat::Error> {
    load_over(sender, duration, CHATS).await
}

/// [`load`] over chats `1..=chats`.
async fn load_over(sender: Sender, duration: Duration, chats: i64) -> Result<(), chat::Error> {
    let every = Duration::from_micros(1_000_000 / RATE);
    let total = duration.as_millis() as u64 * RATE / 1000;
    let mut next = Instant::now();
    for i in 0..total {
        tokio::time::sleep_until(next.into()).await;
        next += every;
        sender.send_next(1 + (i as i64 % chats)).await?;
    }
    Ok(())
}

/// The scenario named `name`.
pub fn find(name: &str) -> Result<&'static dyn Scenario, chat::Error> {
    ALL.iter()
        .copied()
        .find(|s| s.name() == name)
        .ok_or_else(|| {
            format!(
                "unknown scenario {name:?}; known: {}",
                ALL.iter().map(|s| s.name()).collect::<Vec<_>>().join(", ")
            )
            .into()
        })
}

/// Run one scenario; prints its verdict; true if clean.
pub async fn run(
    admin_url: &str,
    scenario: &dyn Scenario,
    hold: Duration,
) -> Result<bool, chat::Error> {
    let name = scenario.name();
    let setup = scenario.setup();
    // Stopped hard, so not the machine's shared server: one of our own
    // (dropped — stopped and removed — after the world has finished).
    let cluster = match setup.postgres {
        Postgres::Shared => None,
        Postgres::Own | Postgres::WithStandby => Some(PgCluster::start().await?),
    };
    let standby = match (&cluster, setup.postgres) {
        (Some(primary), Postgres::WithStandby) => Some(sync_standby(primary).await?),
        _ => None,
    };
    let admin_url = cluster
        .as_ref()
        .map_or_else(|| admin_url.to_owned(), |c| c.url());
    let w = World::start(
        &admin_url,
        Options {
            v2: true,
            consumers_relays: setup.relays,
            relay_flags: setup.relay_flags,
            redis_proxy: setup.redis_proxy,
            pg_proxy: setup.pg_proxy,
            pooler: setup.pooler,
            relay_redis_proxy: setup.relay_redis_proxy,
            // Services and relays on both hosts, following the writable one.
            db_hosts: standby
                .as_ref()
                .zip(cluster.as_ref())
                .map(|(s, p)| format!("127.0.0.1:{},127.0.0.1:{}", p.port(), s.port())),
            ..Default::default()
        },
    )
    .await?;
    if setup.chats > CHATS {
        sqlx::query(&format!(
            "INSERT INTO {}.chats (id, title) SELECT g, 'chat ' || g FROM generate_series($1, $2) g
             ON CONFLICT (id) DO NOTHING",
            w.consumers.schema
        ))
        .bind(CHATS + 1)
        .bind(setup.chats)
        .execute(&w.admin)
        .await?;
    }
    let mut run = Run {
        w,
        cluster,
        standby,
        hold,
        t0: Instant::now(),
        load: scenario.load(hold),
        outage: None,
        ok: true,
        measured: None,
    };
    run.w.consumers.start(&[]).await?;
    run.w.workers.start(&[]).await?;
    let h = run.history();
    let load_task = tokio::spawn(load_over(run.w.sender(), run.load, setup.chats));
    run.t0 = Instant::now();
    scenario.faults(&mut run).await?;
    load_task.await??;
    run.w.converge(Duration::from_secs(60)).await?;

    if let Some((from, to)) = run.outage {
        let outside = h
            .entries()
            .iter()
            .filter(|e| matches!(e.kind, Kind::Indeterminate(_)) && (e.at < from || e.at > to))
            .count();
        println!("answers other than 201 outside the outage: {outside}");
        run.ok &= outside == 0;
    }
    run.ok &= scenario.judge(&run).await?;
    let unsent = run.w.unsent().await?;
    if unsent.unwrap_or(0) > 0 {
        print!("{}", run.w.unsent_rows().await?);
    }
    // Looked up while the schemas still exist; judged once every process has stopped.
    let explained = run.w.explain(&h.verdict(unsent)).await;
    let Run {
        w,
        cluster,
        standby,
        ok,
        ..
    } = run;
    w.finish().await?;
    let v = h.verdict(unsent);
    let ok = v.clean() && ok;
    println!("{}", verdict_line(&format!("scenario {name}"), &v, ok));
    if !ok || std::env::var("CHAOS_TIMELINE").is_ok() {
        print!("{}", h.timeline());
    }
    if !v.clean() {
        print!("{}", v.summary());
        print!("{explained}");
    }
    drop(standby);
    drop(cluster);
    Ok(ok)
}

/// `<label>: saved …, lost 0, unexpected 0, duplicated 0, reordered 0, unsent 0 → ok`,
/// then the indeterminate messages, if any.
pub fn verdict_line(label: &str, v: &Verdict, ok: bool) -> String {
    let mut line = format!(
        "{label}: saved {}, shown {}, lost {}, unexpected {}, duplicated {}, reordered {}, unsent {} → {}",
        v.saved,
        v.received,
        v.lost.len(),
        v.unexpected.len(),
        v.duplicated.len(),
        v.reordered.len(),
        v.unsent.unwrap_or(0),
        if ok { "ok" } else { "FAILED" }
    );
    if v.indeterminate > 0 {
        line.push_str(&format!(
            " (indeterminate {}, {} delivered)",
            v.indeterminate, v.indeterminate_delivered
        ));
    }
    line
}
