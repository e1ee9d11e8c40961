//! `chaos`: the seed's experiment, run for real. It starts the chat services,
//! their relays and its own Redis as processes, injects faults on a schedule,
//! records what every process reports, and judges the history.

mod brokers;
mod explain;
mod history;
mod infra;
mod latency;
mod pg;
mod scenarios;
mod seed;
mod sender;
mod soak;
mod world;

use clap::{Parser, Subcommand, ValueEnum};
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "chaos",
    about = "Fault injection against the postbox chat: deploys, Redis outages, crashes"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// The reference scenario: 10 messages, a workers deploy, Redis down during a consumers deploy, a crash after the inbox.
    Seed(SeedArgs),
    /// Named fault scenarios under load: a name, `fast` (the CI subset) or `all`.
    Run(RunArgs),
    /// List the scenarios.
    List,
    /// Send → shown latency for v1, v2 with NOTIFY and v2 polling only, with a PNG histogram.
    Latency(LatencyArgs),
    /// One system under continuous load for a long time, with random faults (seeded) a few seconds apart.
    Soak(SoakArgs),
}

#[derive(clap::Args)]
struct SoakArgs {
    /// How long to keep the load and the faults going (`30s`, `10m`, `1h`).
    #[arg(long, default_value = "10m", value_parser = humantime_serde::re::humantime::parse_duration)]
    duration: std::time::Duration,
    /// Seed of the fault sequence [default: random, printed].
    #[arg(long)]
    seed: Option<u64>,
}

#[derive(clap::Args)]
struct LatencyArgs {
    /// Messages per measurement.
    #[arg(long, default_value_t = 100)]
    count: u32,
    /// Milliseconds between messages.
    #[arg(long, default_value_t = 100)]
    every_ms: u64,
    /// Repetitions of each variant.
    #[arg(long, default_value_t = 2)]
    reps: usize,
    /// Where to write the histogram.
    #[arg(long, default_value = "target/chaos/latency.png")]
    png: std::path::PathBuf,
    /// Admin PostgreSQL URL (creates per-run roles and schemas).
    #[arg(
        long,
        env = "DATABASE_URL",
        hide_env_values = true,
        default_value = "postgres://postgres:postgres@127.0.0.1:5432/postgres"
    )]
    admin_url: String,
}

#[derive(clap::Args)]
struct RunArgs {
    /// Scenario names, `fast` or `all`.
    #[arg(required = true)]
    scenarios: Vec<String>,
    /// How long the scenarios that hold something hold it: `long-snapshot`
    /// and `idle-writer` their transaction (default 30 s),
    /// `broker-cut-one-relay` and `broker-down-all-relays` the broker cut
    /// (default 60 s; 10 s for `broker-cut-one-relay` in `fast`).
    #[arg(long, value_parser = humantime_serde::re::humantime::parse_duration)]
    hold: Option<std::time::Duration>,
    /// Admin PostgreSQL URL (creates per-run roles and schemas).
    #[arg(
        long,
        env = "DATABASE_URL",
        hide_env_values = true,
        default_value = "postgres://postgres:postgres@127.0.0.1:5432/postgres"
    )]
    admin_url: String,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum, Debug)]
pub enum Version {
    /// The naive dual write (INSERT, then queue.add through an in-memory buffer).
    V1,
    /// postbox: outbox, relay, inbox.
    V2,
    /// v1, then v2.
    Both,
}

#[derive(clap::Args)]
struct SeedArgs {
    /// Which system to run it against.
    #[arg(long, value_enum, default_value = "both")]
    version: Version,
    /// The broker between the services; v1 (the naive dual write) runs over BullMQ only.
    #[arg(long, value_enum, default_value = "bullmq")]
    broker: chat::service::Broker,
    /// Run this service with its Node.js implementation (examples/chat/node,
    /// on the postbox npm package); v2 over BullMQ only.
    #[arg(long, value_name = "SERVICE")]
    node: Option<chat::node::Service>,
    /// Repeat v2 this many times (the result must not change).
    #[arg(long, default_value_t = 1)]
    runs: usize,
    /// Admin PostgreSQL URL (creates per-run roles and schemas).
    #[arg(
        long,
        env = "DATABASE_URL",
        hide_env_values = true,
        default_value = "postgres://postgres:postgres@127.0.0.1:5432/postgres"
    )]
    admin_url: String,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let rt = tokio::runtime::Runtime::new().expect("tokio runtime");
    let result = rt.block_on(async move {
        // Interrupted or terminated: drop the run, so its guards kill the
        // processes, the Redis and the PostgreSQL cluster it started.
        use tokio::signal::unix::{signal, SignalKind};
        let mut term = signal(SignalKind::terminate())?;
        tokio::select! {
            r = command(cli.command) => r,
            _ = tokio::signal::ctrl_c() => Err("interrupted".into()),
            _ = term.recv() => Err("terminated".into()),
        }
    });
    match result {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(2)
        }
    }
}

async fn command(command: Command) -> Result<bool, chat::Error> {
    match command {
        Command::Seed(a) => {
            let mut ok = true;
            let bullmq = a.broker == chat::service::Broker::Bullmq;
            if a.node.is_some() {
                if !bullmq {
                    return Err("--node runs the Node.js service over BullMQ only".into());
                }
                if a.version == Version::V1 {
                    return Err("--node runs postbox's version (v2); v1 is Rust only".into());
                }
                chat::node::check_installed()?;
            }
            match a.version {
                Version::V1 if !bullmq => {
                    return Err("v1 (the naive dual write) runs over BullMQ only".into())
                }
                Version::Both if a.node.is_some() => {
                    println!("(v1, the naive dual write, runs in Rust only: v2 alone)")
                }
                Version::Both if !bullmq => {
                    println!("(v1, the naive dual write, runs over BullMQ only: v2 alone)")
                }
                Version::V1 | Version::Both => {
                    ok &= seed::run(&a.admin_url, Version::V1, a.broker, None).await?;
                }
                Version::V2 => {}
            }
            if matches!(a.version, Version::V2 | Version::Both) {
                for _ in 0..a.runs {
                    ok &= seed::run(&a.admin_url, Version::V2, a.broker, a.node).await?;
                }
            }
            Ok::<bool, chat::Error>(ok)
        }
        Command::Run(a) => {
            // Each scenario, and whether it runs as part of `fast`.
            let mut chosen = Vec::new();
            for s in &a.scenarios {
                match s.as_str() {
                    "all" => chosen.extend(scenarios::ALL.iter().map(|s| (*s, false))),
                    "fast" => {
                        for name in scenarios::FAST {
                            chosen.push((scenarios::find(name)?, true));
                        }
                    }
                    other => chosen.push((scenarios::find(other)?, false)),
                }
            }
            let mut failed = Vec::new();
            for (scenario, fast) in chosen {
                let hold = a.hold.unwrap_or_else(|| scenario.default_hold(fast));
                if !scenarios::run(&a.admin_url, scenario, hold).await? {
                    failed.push(scenario.name());
                }
            }
            if !failed.is_empty() {
                println!("failed: {}", failed.join(", "));
            }
            Ok(failed.is_empty())
        }
        Command::Latency(a) => {
            latency::run(
                &a.admin_url,
                a.count,
                std::time::Duration::from_millis(a.every_ms),
                a.reps,
                &a.png,
            )
            .await
        }
        Command::Soak(a) => soak::run(a.duration, a.seed).await,
        Command::List => {
            for s in scenarios::ALL {
                println!("{:<22} {}", s.name(), s.about());
            }
            Ok(true)
        }
    }
}
