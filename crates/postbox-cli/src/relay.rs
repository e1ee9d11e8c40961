//! `postbox relay`.

use crate::settings::{Overrides, Settings};
use crate::CliError;
use postbox_bullmq::BullmqSink;
use postbox_relay::Relay;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

#[derive(clap::Args)]
#[command(
    after_help = "Settings are layered: built-in defaults < config file < environment < flags.\nPasswords in URLs are never printed."
)]
pub struct Args {
    #[command(flatten)]
    overrides: Overrides,
    /// Print the effective settings (passwords redacted) and exit.
    #[arg(long)]
    print_config: bool,
}

pub async fn run(a: Args, shutdown: CancellationToken) -> Result<(), CliError> {
    let s = Settings::load(&a.overrides)?;
    if a.print_config {
        println!("{:#?}", s);
        return Ok(());
    }
    let sink = Arc::new(BullmqSink::new(s.bullmq.clone())?);
    tracing::info!(database = %s.relay.database_url, redis = %s.bullmq.redis_url, "starting relay");
    let relay = Relay::new(s.relay, sink)?;
    relay.run(shutdown).await?;
    Ok(())
}
