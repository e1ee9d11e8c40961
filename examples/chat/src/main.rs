//! `chat`: the seed's two-service chat on postbox.
//!
//! `chat setup` creates each service's role and schema, `chat serve` runs one
//! service (HTTP API, web page, socket.io, inbox worker), `chat demo` starts
//! the whole system and runs a scripted conversation.

use chat::{demo, service, setup};
use clap::{Parser, Subcommand};
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "chat",
    about = "Two-service real-time chat over postbox (outbox → BullMQ → inbox)"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Create the services' roles, schemas and tables (as an admin).
    Setup(setup::SetupArgs),
    /// Run one service.
    Serve(service::Args),
    /// Start both services and their relays, then run a scripted conversation.
    Demo(demo::Args),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let default = match cli.command {
        Command::Serve(_) => "info,sqlx=warn,bullmq=warn",
        _ => "warn,sqlx=error",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
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
    let result = rt.block_on(async move {
        match cli.command {
            Command::Setup(a) => setup::run(a).await,
            Command::Serve(a) => service::run(a).await,
            Command::Demo(a) => demo::run(a).await,
        }
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
