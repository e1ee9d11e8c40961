//! `postbox-bench`: the benchmark suite (issue #7), a tool beside the
//! `postbox` binary as pgbench is beside PostgreSQL. Each figure is printed
//! next to a baseline measured in the same run, as a ratio, over several
//! repetitions (median, min–max), with the machine's core count.
//!
//! One file per benchmark: [`drain`] (relay drain rate), [`latency`] (producer
//! commit → consumer inbox commit), [`producer`] (cost of the outbox row to a
//! producer), [`consumer`] (inbox worker throughput), [`load`] (the whole
//! pipeline with producers flat out), [`restart`] (latency during a rolling
//! relay restart), [`sick_relay`] (one of two relays cut off from its broker,
//! or slow to reach it, per `unavailable_after`), [`replay`] (latency while
//! `postbox replay` runs),
//! [`scheduled`] (the drain beside scheduled events, their lateness), [`health`]
//! (outbox size under sustained load); [`ctx`] holds
//! what every run shares, [`parts`] what several benchmarks assemble,
//! [`report`] prints the tables, writes JSON and the PNG; [`args`] holds the
//! flags and their defaults, [`relay`] those that are the relay's settings.

mod args;
mod console;
mod consumer;
mod cpu;
mod ctx;
mod drain;
mod health;
mod latency;
mod load;
mod parts;
mod producer;
mod relay;
mod replay;
mod report;
mod restart;
mod scheduled;
mod sick_relay;

use args::{Args, Params, Which};
use clap::{Parser, ValueEnum};
use ctx::Ctx;
use parts::{relay_ready, warm, InboxOnly, NullSink};
use std::process::ExitCode;

/// Boxed error for the benchmarks: each one already says what to do.
pub type BenchError = Box<dyn std::error::Error + Send + Sync>;

#[derive(Parser)]
#[command(
    name = "postbox-bench",
    version,
    about = "Benchmarks of postbox: relay drain, end-to-end latency, producer overhead, consumer throughput, table health",
    long_about = None
)]
struct Cli {
    /// Log format. Log level comes from RUST_LOG (default: warnings).
    #[arg(long, value_enum, default_value = "text", env = "POSTBOX_LOG_FORMAT")]
    log_format: LogFormat,
    #[command(flatten)]
    args: Args,
}

#[derive(Clone, Copy, ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

// The relay runs in this process: the `postbox` binary's allocator, so that
// its CPU per event is measured as it is shipped.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    conventional_env();
    let cli = Cli::parse();
    // The bench closes its workers once their queue is done; the worker's
    // complaint that its idle blocking poll was cut short is noise.
    init_logs(cli.log_format, "warn,sqlx=error,bullmq::worker=error");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    match rt.block_on(run(cli.args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            let mut msg = format!("error: {e}");
            let mut src = e.source();
            while let Some(s) = src {
                let s_str = s.to_string();
                if !msg.contains(&s_str) {
                    msg.push_str(&format!("\n  caused by: {s_str}"));
                }
                src = s.source();
            }
            eprintln!("{msg}");
            ExitCode::FAILURE
        }
    }
}

async fn run(a: Args) -> Result<(), BenchError> {
    let (which, params) = a.resolve()?;
    let ctx = Ctx::connect(params).await?;
    let mut rep = report::Report::new(&ctx);
    println!(
        "postbox-bench {}: {} cores, {} repetitions, {}",
        which
            .iter()
            .filter_map(|w| Some(w.to_possible_value()?.get_name().to_owned()))
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

async fn run_all(ctx: &Ctx, which: &[Which], rep: &mut report::Report) -> Result<(), BenchError> {
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
            Which::SickRelay => rep.sick_relay = Some(sick_relay::run(ctx).await?),
            Which::Replay => rep.replay = Some(replay::run(ctx).await?),
            Which::Scheduled => {
                let (drain, late) = scheduled::run(ctx).await?;
                rep.scheduled = Some(drain);
                rep.scheduled_lateness = Some(late);
            }
            Which::Console => console::run(ctx).await?,
            Which::All => unreachable!("expanded by resolve"),
        }
    }
    Ok(())
}

/// `DATABASE_URL` and `REDIS_URL`, the variables other tools use, stand in for
/// `POSTBOX_DATABASE_URL` and `POSTBOX_REDIS_URL` when those are unset, as
/// they do for `postbox demo`.
fn conventional_env() {
    for (ours, conventional) in [
        ("POSTBOX_DATABASE_URL", "DATABASE_URL"),
        ("POSTBOX_REDIS_URL", "REDIS_URL"),
    ] {
        if std::env::var_os(ours).is_none() {
            if let Some(v) = std::env::var_os(conventional) {
                // Still single-threaded: no other thread reads the environment yet.
                std::env::set_var(ours, v);
            }
        }
    }
}

fn init_logs(format: LogFormat, default: &str) {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        // Colour only on a terminal, and never with NO_COLOR set (no-color.org).
        .with_ansi(
            std::io::IsTerminal::is_terminal(&std::io::stderr())
                && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty()),
        );
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}
