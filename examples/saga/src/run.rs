//! `saga run`: the scripted run. It places orders at a steady rate through the
//! orders service while it kills relays (SIGKILL, then a new process) and
//! restarts the broker, waits until the saga has settled, then judges the
//! final state with [`crate::check`] and prints the summary table.

use crate::check::{judge, Expectations, Expected, State, Verdict};
use crate::infra::{locate_in_kafka, BrokerProc, Options, World, KAFKA_RESTART_REFUSED};
use crate::model::*;
use crate::services::Saga;
use crate::Error;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// A fault the run injects while orders flow.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, clap::ValueEnum)]
pub enum Fault {
    /// SIGKILL one service's relay, start a new one a moment later.
    RelayKill,
    /// SIGKILL the broker, start it again on the same storage.
    BrokerRestart,
    /// SIGKILL one service process, start a new one a moment later.
    ServiceKill,
    /// No fault (`--faults none`).
    None,
}

impl Fault {
    fn name(self) -> &'static str {
        match self {
            Fault::RelayKill => "relay-kill",
            Fault::BrokerRestart => "broker-restart",
            Fault::ServiceKill => "service-kill",
            Fault::None => "none",
        }
    }

    /// How often it is drawn relative to the others: relay kills are cheap and
    /// the point of the run; a broker restart stalls every consumer for seconds.
    fn weight(self) -> u32 {
        match self {
            Fault::RelayKill => 3,
            Fault::ServiceKill => 2,
            Fault::BrokerRestart | Fault::None => 1,
        }
    }
}

/// Draw a fault from `faults` by weight.
fn draw(faults: &[Fault], rng: &mut StdRng) -> Fault {
    let total: u32 = faults.iter().map(|f| f.weight()).sum();
    let mut x = rng.random_range(0..total);
    for &f in faults {
        if x < f.weight() {
            return f;
        }
        x -= f.weight();
    }
    unreachable!("x < total")
}

#[derive(clap::Args, Clone, Debug)]
pub struct RunArgs {
    /// Orders to place.
    #[arg(long, default_value_t = 1000)]
    pub orders: usize,
    /// Share of orders paid with a card that is declined.
    #[arg(long, default_value_t = 0.1)]
    pub payment_failure_share: f64,
    /// Share of orders for a product that is sold out.
    #[arg(long, default_value_t = 0.1)]
    pub out_of_stock_share: f64,
    #[arg(long, value_enum, default_value_t = Broker::Kafka)]
    pub broker: Broker,
    /// Faults to inject while orders are placed (comma-separated, or `none`).
    /// Default: relay-kill,broker-restart over BullMQ; relay-kill,service-kill
    /// over Kafka, whose test broker cannot restart without losing events.
    #[arg(long, value_enum, value_delimiter = ',')]
    pub faults: Option<Vec<Fault>>,
    /// Seed of the order mix and of the fault schedule.
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
    /// Orders placed per second.
    #[arg(long, default_value_t = 100.0)]
    pub rate: f64,
    /// Mean pause between two faults, in milliseconds.
    #[arg(long, default_value_t = 1000)]
    pub fault_interval_ms: u64,
    /// Give up waiting for the saga to settle after this many seconds.
    #[arg(long, default_value_t = 180)]
    pub settle_timeout_s: u64,
    #[arg(
        long,
        env = "DATABASE_URL",
        hide_env_values = true,
        default_value = "postgres://postgres:postgres@127.0.0.1:5432/postgres"
    )]
    pub database_url: String,
    /// Keep the schemas after the run (to inspect them).
    #[arg(long)]
    pub keep: bool,
    /// Echo the services' output.
    #[arg(long)]
    pub verbose: bool,
}

/// Products that hold enough for every order that asks for them, and one that is sold out.
pub const SOLD_OUT: &str = "sku-sold-out";
const PRODUCTS: [(&str, i64); 5] = [
    ("sku-kettle", 2_500),
    ("sku-teapot", 3_900),
    ("sku-mug", 900),
    ("sku-tray", 1_500),
    ("sku-cosy", 1_200),
];

/// The orders of a run and what each must end as.
pub struct Plan {
    pub orders: Vec<(NewOrder, Expected)>,
    pub initial_stock: BTreeMap<String, i64>,
}

/// Draw the run's orders from `seed`. Each regular product starts with what
/// its orders ask for plus a margin (declined orders reserve too, then give
/// back), so a shortage happens exactly for the sold-out product.
pub fn plan(orders: usize, payment_failure_share: f64, out_of_stock_share: f64, seed: u64) -> Plan {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut stock: BTreeMap<String, i64> =
        PRODUCTS.iter().map(|(s, _)| (s.to_string(), 5)).collect();
    stock.insert(SOLD_OUT.into(), 0);
    let orders = (0..orders)
        .map(|_| {
            let r: f64 = rng.random();
            let qty: i32 = rng.random_range(1..=3);
            let (sku, price) = PRODUCTS[rng.random_range(0..PRODUCTS.len())];
            let mut o = NewOrder {
                sku: sku.into(),
                qty,
                amount_cents: price * i64::from(qty),
                card: CARD_OK.into(),
            };
            let expected = if r < payment_failure_share {
                o.card = CARD_DECLINED.into();
                Expected::Cancelled(REASON_PAYMENT_DECLINED)
            } else if r < payment_failure_share + out_of_stock_share {
                o.sku = SOLD_OUT.into();
                Expected::Cancelled(REASON_OUT_OF_STOCK)
            } else {
                Expected::Confirmed
            };
            if o.sku != SOLD_OUT {
                *stock.get_mut(&o.sku).expect("a listed product") += i64::from(qty);
            }
            (o, expected)
        })
        .collect();
    Plan {
        orders,
        initial_stock: stock,
    }
}

/// The binaries a world runs: `saga` itself and `postbox` next to it.
pub fn sibling_binaries() -> Result<(PathBuf, PathBuf), Error> {
    let exe = std::env::current_exe()?;
    Ok((exe.clone(), exe.with_file_name("postbox")))
}

/// Wait until the saga has settled (or `timeout`), printing progress.
pub async fn settle(world: &World, timeout: Duration, started: Instant) -> Result<State, Error> {
    let deadline = Instant::now() + timeout;
    let mut last_report = Instant::now();
    loop {
        let st = State::load(&world.pool, &world.names).await?;
        if st.settled() || Instant::now() > deadline {
            return Ok(st);
        }
        if last_report.elapsed() > Duration::from_secs(5) {
            println!(
                "  {:6.2}s settling: {} orders pending, {} events unsent, {} not yet consumed",
                started.elapsed().as_secs_f64(),
                st.pending(),
                st.unsent,
                st.undelivered()
            );
            last_report = Instant::now();
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Inject one fault, chosen and timed by `rng`; returns a timeline line.
async fn inject(world: &mut World, fault: Fault, rng: &mut StdRng) -> Result<String, Error> {
    let svc = Service::ALL[rng.random_range(0..3)];
    let pause = Duration::from_millis(rng.random_range(100..=800));
    Ok(match fault {
        Fault::RelayKill => {
            world.kill_relay(svc).await;
            tokio::time::sleep(pause).await;
            world.start_relay(svc);
            format!(
                "relay({svc}) SIGKILL, new relay after {} ms",
                pause.as_millis()
            )
        }
        Fault::BrokerRestart => {
            let pause = pause * 2;
            world.restart_broker(pause).await?;
            format!("broker SIGKILL, restarted after {} ms", pause.as_millis())
        }
        Fault::None => String::new(),
        Fault::ServiceKill => {
            world.kill_service(svc).await;
            tokio::time::sleep(pause).await;
            world.start_service(svc)?;
            format!(
                "service {svc} SIGKILL, new process after {} ms",
                pause.as_millis()
            )
        }
    })
}

/// The outcome of a run.
pub struct Report {
    pub verdict: Verdict,
    pub faults: BTreeMap<Fault, usize>,
    pub duplicates_skipped: u64,
    pub elapsed: Duration,
    /// Where undelivered events are (Kafka): in the log or not.
    pub diagnostics: Vec<String>,
}

pub async fn run(a: RunArgs) -> Result<Report, Error> {
    let (saga_bin, postbox_bin) = sibling_binaries()?;
    execute(&a, saga_bin, postbox_bin).await
}

/// The run, with the binaries given (tests pass cargo's).
pub async fn execute(
    a: &RunArgs,
    saga_bin: PathBuf,
    postbox_bin: PathBuf,
) -> Result<Report, Error> {
    if !(0.0..=1.0).contains(&(a.payment_failure_share + a.out_of_stock_share))
        || a.payment_failure_share < 0.0
        || a.out_of_stock_share < 0.0
    {
        return Err(
            "the payment-failure and out-of-stock shares must be ≥ 0 and add up to at most 1"
                .into(),
        );
    }
    let started = Instant::now();
    let plan = plan(
        a.orders,
        a.payment_failure_share,
        a.out_of_stock_share,
        a.seed,
    );
    let faults: Vec<Fault> = {
        let mut f = a.faults.clone().unwrap_or_else(|| match a.broker {
            Broker::Kafka => vec![Fault::RelayKill, Fault::ServiceKill],
            Broker::Bullmq => vec![Fault::RelayKill, Fault::BrokerRestart],
        });
        f.retain(|f| *f != Fault::None);
        f.sort();
        f.dedup();
        f
    };
    if a.broker == Broker::Kafka && faults.contains(&Fault::BrokerRestart) {
        return Err(KAFKA_RESTART_REFUSED.into());
    }
    let mut world = World::start(Options {
        broker: a.broker,
        database_url: a.database_url.clone(),
        prefix: None,
        stock: plan
            .initial_stock
            .iter()
            .map(|(k, v)| (k.clone(), *v))
            .collect(),
        saga_bin,
        postbox_bin,
        verbose: a.verbose,
    })
    .await?;
    println!(
        "  {:6.2}s started: broker {}, schemas {}_{{orders,inventory,payments}}, 3 relays, 3 services",
        started.elapsed().as_secs_f64(),
        a.broker,
        world.names.prefix()
    );

    // Orders go in from a task of their own; the faults hit while they flow.
    let orders = Saga::new(&world.names, Service::Orders)?;
    let pool = world.pool.clone();
    let mix = plan.orders.clone();
    let interval = Duration::from_secs_f64(1.0 / a.rate.max(0.1));
    let placer = tokio::spawn(async move {
        let mut tick = tokio::time::interval(interval);
        let mut placed = Vec::with_capacity(mix.len());
        for (o, expected) in mix {
            tick.tick().await;
            placed.push((orders.place_order(&pool, &o).await?, expected));
        }
        Ok::<_, Error>(placed)
    });
    let mut rng = StdRng::seed_from_u64(a.seed.wrapping_add(1));
    let mut injected: BTreeMap<Fault, usize> = BTreeMap::new();
    while !placer.is_finished() && !faults.is_empty() {
        let wait = a.fault_interval_ms / 2 + rng.random_range(0..=a.fault_interval_ms);
        tokio::time::sleep(Duration::from_millis(wait)).await;
        if placer.is_finished() {
            break;
        }
        let fault = draw(&faults, &mut rng);
        let line = inject(&mut world, fault, &mut rng).await?;
        *injected.entry(fault).or_default() += 1;
        println!("  {:6.2}s {line}", started.elapsed().as_secs_f64());
    }
    let placed = placer.await??;
    println!(
        "  {:6.2}s placed {} orders",
        started.elapsed().as_secs_f64(),
        placed.len()
    );

    let state = settle(&world, Duration::from_secs(a.settle_timeout_s), started).await?;
    let expectations = Expectations {
        outcome: placed.into_iter().collect(),
        initial_stock: plan.initial_stock.clone(),
    };
    let verdict = judge(&expectations, &state);
    let mut diagnostics = Vec::new();
    if let BrokerProc::Kafka(b) = &world.broker {
        for s in Service::ALL {
            let missing = state.missing(s);
            if !missing.is_empty() {
                let (topic, group) = (world.names.topic(s), world.names.group(s));
                diagnostics
                    .extend(locate_in_kafka(&b.bootstrap(), &topic, &group, &missing).await?);
            }
        }
    }
    let ok = verdict.ok();
    let report = Report {
        verdict,
        faults: injected,
        duplicates_skipped: world.duplicates.load(Ordering::Relaxed),
        elapsed: started.elapsed(),
        diagnostics,
    };
    if !ok {
        println!("schemas {}_* kept for inspection", world.names.prefix());
    }
    world.stop(a.keep || !ok).await?;
    Ok(report)
}

impl Report {
    /// The summary printed at the end of a run.
    pub fn summary(&self, a: &RunArgs) -> String {
        let faults = if self.faults.is_empty() {
            "none".to_owned()
        } else {
            self.faults
                .iter()
                .map(|(f, n)| format!("{} ×{n}", f.name()))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let v = &self.verdict;
        let diagnostics: String = self
            .diagnostics
            .iter()
            .map(|d| format!("  {d}\n"))
            .collect();
        format!(
            "\nsaga run: {} orders over {}, seed {}, faults: {faults}\n\
             settled in {:.1} s; events written {}, consumed {}; duplicates skipped by inboxes {}\n\n{}{diagnostics}\
             verdict: {}\n",
            a.orders,
            a.broker,
            a.seed,
            self.elapsed.as_secs_f64(),
            v.events_written,
            v.events_consumed,
            self.duplicates_skipped,
            v.table(),
            if v.ok() { "all invariants hold" } else { "INVARIANTS VIOLATED" }
        )
    }
}
