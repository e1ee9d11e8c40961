//! `saga`: the choreography saga over postbox. `saga run` is the scripted run
//! (orders, faults, invariants, summary); `saga serve` is one service process.

use clap::{Parser, Subcommand};
use saga::{run, transport};
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "saga",
    about = "Order → inventory → payment saga over postbox (Kafka or BullMQ)"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Place orders under faults, wait until the saga settles, check the invariants.
    Run(run::RunArgs),
    /// Run one service (orders, inventory or payments) until SIGTERM.
    Serve(transport::ServeArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn,sqlx=error"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        // Colour only on a terminal, and never with NO_COLOR set (no-color.org).
        .with_ansi(
            std::io::IsTerminal::is_terminal(&std::io::stderr())
                && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty()),
        )
        .init();
    let rt = tokio::runtime::Runtime::new().expect("tokio runtime");
    rt.block_on(async move {
        match cli.command {
            Command::Serve(a) => match transport::serve(a).await {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("error: {e}");
                    ExitCode::FAILURE
                }
            },
            Command::Run(a) => match run::run(a.clone()).await {
                Ok(report) => {
                    print!("{}", report.summary(&a));
                    if report.verdict.ok() {
                        ExitCode::SUCCESS
                    } else {
                        ExitCode::FAILURE
                    }
                }
                Err(e) => {
                    eprintln!("error: {e}");
                    ExitCode::from(2)
                }
            },
        }
    })
}
