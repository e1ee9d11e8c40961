//! `postbox relay`.

use crate::settings::SinkKind;
use crate::settings::{Overrides, Settings};
use crate::CliError;
use postbox_bullmq::BullmqSink;
use postbox_kafka::KafkaSink;
use postbox_relay::{Relay, RouteMatch, Router, Sink, TopicPattern};
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
    let sink = build_sink(&s)?;
    tracing::info!(database = %s.relay.database_url, sink = sink.name(), "starting relay");
    let relay = Relay::new(s.relay, sink)?;
    let admin = match &s.admin_listen {
        Some(addr) => Some(crate::admin::serve(addr, relay.readiness(), shutdown.clone()).await?),
        None => None,
    };
    relay.run(shutdown.clone()).await?;
    shutdown.cancel();
    if let Some(a) = admin {
        let _ = a.await;
    }
    Ok(())
}

/// One sink per kind in use; a router in front when routes are configured.
fn build_sink(s: &Settings) -> Result<Arc<dyn Sink>, CliError> {
    let mut used = vec![s.sink];
    used.extend(s.routes.iter().map(|r| r.sink));
    let bullmq: Option<Arc<dyn Sink>> = if used.contains(&SinkKind::Bullmq) {
        tracing::info!(redis = %s.bullmq.redis_url, "BullMQ sink");
        Some(Arc::new(BullmqSink::new(s.bullmq.clone())?))
    } else {
        None
    };
    let kafka: Option<Arc<dyn Sink>> = if used.contains(&SinkKind::Kafka) {
        tracing::info!(brokers = %s.kafka.brokers, "Kafka sink");
        Some(Arc::new(KafkaSink::new(s.kafka.clone())?))
    } else {
        None
    };
    let pick = |k: SinkKind| -> Arc<dyn Sink> {
        match k {
            SinkKind::Bullmq => bullmq.clone().expect("built above"),
            SinkKind::Kafka => kafka.clone().expect("built above"),
        }
    };
    if s.routes.is_empty() {
        return Ok(pick(s.sink));
    }
    let mut router = Router::new(pick(s.sink));
    for r in &s.routes {
        if r.topic.as_deref() == Some("") || (r.topic.is_none() && r.schema.is_none()) {
            return Err(
                "invalid route: give a non-empty `topic` pattern, a `schema`, or both".into(),
            );
        }
        let m = RouteMatch {
            topic: r.topic.clone().map(TopicPattern::new),
            schema: r.schema.clone(),
        };
        router = router.route(m, pick(r.sink));
    }
    Ok(Arc::new(router))
}
