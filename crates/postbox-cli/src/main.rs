//! `postbox`: migrate schemas, run the relay, run the demo. The benchmarks
//! are a binary of their own, `postbox-bench` (crates/postbox-bench).

mod admin;
mod connection;
mod console;
mod demo;
mod dlq;
mod grant;
mod migrate;
mod relay;
mod replay;
mod scheduled;
mod services;
mod settings;
mod status;
mod table;
mod target;

use clap::{Parser, Subcommand, ValueEnum};
use std::process::ExitCode;
use tokio_util::sync::CancellationToken;

/// `0.1.0 (commit 1a2b3c4d5e6f)`: the release and the commit it was built from.
const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("POSTBOX_GIT_COMMIT"),
    ")"
);

#[derive(Parser)]
#[command(name = "postbox", version = VERSION, about = "Transactional outbox and inbox for PostgreSQL", long_about = None)]
struct Cli {
    /// Log format. Log level comes from RUST_LOG (default: info).
    #[arg(
        long,
        global = true,
        value_enum,
        default_value = "text",
        env = "POSTBOX_LOG_FORMAT"
    )]
    log_format: LogFormat,
    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Copy, ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

#[derive(Subcommand)]
enum Command {
    /// Create or upgrade the outbox, dead-letter and inbox tables in a schema.
    Migrate(migrate::Args),
    /// Run the relay daemon: move committed outbox events to the brokers (BullMQ, Kafka, RabbitMQ, NATS JetStream, Redis Streams, HTTP webhooks, SQS, SNS).
    Relay(Box<relay::Args>),
    /// Quick demo: produce events, relay them to BullMQ, consume them through the inbox.
    Demo(demo::Args),
    /// Grant a role the least rights it needs as a producer, the relay, a consumer or the console (connect as the schema's owner or a superuser).
    Grant(grant::Args),
    /// Inspect, replay or purge dead letters (events the relay gave up on).
    Dlq(dlq::Args),
    /// Inspect, replay or purge consumer dead letters (messages a consumer's handler gave up on).
    InboxDlq(dlq::InboxArgs),
    /// Send retained events again (sent rows still within outbox_retention), with their event ids, to a consumer that was not there. A dry run without --yes.
    Replay(replay::Args),
    /// List the events scheduled ahead (deliver_at) that are not yet due, or cancel them.
    Scheduled(scheduled::Args),
    /// Pending rows, retries and dead letters per topic, and which relays own which partitions.
    Status(status::Args),
    /// The operator console: a web UI and JSON API over lag, relays, halted keys and dead letters.
    Console(console::Args),
}

// mimalloc rather than the system allocator: the relay allocates per event
// (rows, jobs, encoded messages) and spends less CPU in mimalloc; measured in
// docs/src/benchmarks.md ("The allocator").
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let cli = parse();
    // The demo prints its own report; keep library logs to warnings there.
    let quiet = matches!(
        cli.command,
        Command::Demo(_)
            | Command::Dlq(_)
            | Command::InboxDlq(_)
            | Command::Replay(_)
            | Command::Scheduled(_)
            | Command::Status(_)
    );
    init_logs(
        cli.log_format,
        if quiet {
            "warn,sqlx=error"
        } else {
            "info,sqlx=warn"
        },
    );
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    let result = rt.block_on(async move {
        match cli.command {
            Command::Migrate(a) => migrate::run(a).await,
            Command::Relay(a) => relay::run(*a, shutdown_signal()).await,
            Command::Demo(a) => demo::run(a).await,
            Command::Dlq(a) => dlq::run(a).await,
            Command::InboxDlq(a) => dlq::run_inbox(a).await,
            Command::Grant(a) => grant::run(a).await,
            Command::Replay(a) => replay::run(a, shutdown_signal()).await,
            Command::Scheduled(a) => scheduled::run(a).await,
            Command::Status(a) => status::run(a).await,
            Command::Console(a) => console::run(a, shutdown_signal()).await,
        }
    });
    match result {
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

/// The command line, or clap's error and exit; `postbox bench`, which
/// this binary had, gets a tip naming the binary the benchmarks moved to.
fn parse() -> Cli {
    use clap::error::{ContextKind, ContextValue, ErrorKind};
    Cli::try_parse().unwrap_or_else(|mut e| {
        if e.kind() == ErrorKind::InvalidSubcommand
            && matches!(e.get(ContextKind::InvalidSubcommand), Some(ContextValue::String(s)) if s == "bench")
        {
            e.insert(
                ContextKind::Suggested,
                ContextValue::StyledStrs(vec![
                    "the benchmarks are their own binary now: `postbox-bench` (cargo build --release -p postbox-bench)".into(),
                ]),
            );
        }
        e.exit()
    })
}

/// Boxed error for the commands: each one already says what to do.
pub type CliError = Box<dyn std::error::Error + Send + Sync>;

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

/// One token for the whole process, cancelled by SIGTERM or SIGINT.
fn shutdown_signal() -> CancellationToken {
    let token = CancellationToken::new();
    let t = token.clone();
    tokio::spawn(async move {
        use tokio::signal::unix::{signal, SignalKind};
        let mut term = signal(SignalKind::terminate()).expect("SIGTERM handler");
        let mut int = signal(SignalKind::interrupt()).expect("SIGINT handler");
        tokio::select! {
            _ = term.recv() => tracing::info!("SIGTERM: finishing the batch in flight, then stopping"),
            _ = int.recv() => tracing::info!("SIGINT: finishing the batch in flight, then stopping"),
            _ = t.cancelled() => return,
        }
        t.cancel();
    });
    token
}
