//! `saga serve`: one service as its own process, consuming its inbound topic
//! (Kafka) or queue (BullMQ) through its inbox until SIGTERM. The broker
//! adapters only extract (event, payload) and hand them to [`Saga::handle`].

use crate::model::{Broker, Names, OrderEvent, Service};
use crate::services::Saga;
use crate::Error;
use postbox::BoxError;
use postbox::Inbox;
use postbox_bullmq::bullmq::options::RedisConnectionOptions;
use postbox_bullmq::bullmq::WorkerOptions;
use postbox_bullmq::inbox_worker;
use postbox_kafka::inbox_consumer;
use postbox_kafka::rdkafka::consumer::{Consumer, StreamConsumer};
use sqlx::PgConnection;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// What the harness counts on a service's stdout: one line per redelivery
/// the inbox recognised and skipped.
pub const DUPLICATE_LINE: &str = "duplicate skipped:";

#[derive(clap::Args, Clone, Debug)]
pub struct ServeArgs {
    /// Which service this process is.
    #[arg(long, value_enum)]
    pub service: Service,
    /// The deployment's name prefix (schemas `<prefix>_<service>`, topics `<prefix>-<service>`).
    #[arg(long)]
    pub prefix: String,
    #[arg(long, value_enum, default_value_t = Broker::Kafka)]
    pub broker: Broker,
    #[arg(long, env = "DATABASE_URL", hide_env_values = true)]
    pub database_url: String,
    #[arg(long, default_value = "127.0.0.1:9092")]
    pub kafka_brokers: String,
    #[arg(long, default_value = "redis://127.0.0.1:6379")]
    pub redis_url: String,
    /// BullMQ jobs processed at once (events of one order are never in flight
    /// together: each step is caused by the previous one).
    #[arg(long, default_value_t = 4)]
    pub concurrency: usize,
}

/// Adapts a [`Saga`] to both brokers' inbox helpers.
struct Handler(Arc<Saga>);

impl Handler {
    fn duplicate(&self, event: &str, payload: Option<OrderEvent>) {
        let order = payload.map(|p| p.order_id.to_string()).unwrap_or_default();
        println!("{DUPLICATE_LINE} {} {event} {order}", self.0.service);
    }
}

/// One handler for both brokers: each wrapper hands over a [`postbox::Message`].
impl postbox::Handler for Handler {
    async fn handle(&self, tx: &mut PgConnection, msg: &postbox::Message) -> Result<(), BoxError> {
        let payload: serde_json::Value = msg.json()?;
        self.0.handle(tx, msg.event(), &payload).await?;
        Ok(())
    }

    async fn on_duplicate(&self, msg: &postbox::Message) {
        self.duplicate(msg.event(), msg.json().ok());
    }
}

pub async fn serve(a: ServeArgs) -> Result<(), Error> {
    let names = Names::new(&a.prefix)?;
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(a.concurrency as u32 + 2)
        .acquire_timeout(Duration::from_secs(30))
        .connect(&a.database_url)
        .await
        .map_err(|e| format!("{}: cannot connect to PostgreSQL: {e}", a.service))?;
    let handler = Arc::new(Handler(Arc::new(Saga::new(&names, a.service)?)));
    let inbox = Inbox::new(names.schema(a.service).as_str())?;
    let shutdown = CancellationToken::new();
    {
        let shutdown = shutdown.clone();
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
        tokio::spawn(async move {
            tokio::select! {
                _ = term.recv() => {}
                _ = tokio::signal::ctrl_c() => {}
            }
            shutdown.cancel();
        });
    }
    let topic = names.topic(a.service);
    let consumer = names.consumer(a.service);
    match a.broker {
        Broker::Kafka => {
            let group = names.group(a.service);
            consume_kafka(
                &pool, &inbox, &consumer, &group, &topic, &a, &handler, shutdown,
            )
            .await
        }
        Broker::Bullmq => {
            consume_bullmq(pool, inbox, &consumer, &topic, &a, handler, shutdown).await
        }
    }
}

/// Backoff between attempts to (re)start a consumer while the broker is away.
async fn pause(delay: &mut Duration, shutdown: &CancellationToken) -> bool {
    tokio::select! {
        _ = shutdown.cancelled() => return false,
        _ = tokio::time::sleep(*delay) => {}
    }
    *delay = (*delay * 2).min(Duration::from_secs(2));
    true
}

#[allow(clippy::too_many_arguments)]
async fn consume_kafka(
    pool: &sqlx::PgPool,
    inbox: &Inbox,
    name: &str,
    group: &str,
    topic: &str,
    a: &ServeArgs,
    handler: &Handler,
    shutdown: CancellationToken,
) -> Result<(), Error> {
    let mut delay = Duration::from_millis(100);
    loop {
        let consumer: Result<StreamConsumer, _> =
            postbox_kafka::consumer_config(&a.kafka_brokers, group).create();
        let result = match consumer {
            Ok(c) => match c.subscribe(&[topic]) {
                Ok(()) => {
                    let inbox = postbox::InboxConsumer::new(pool.clone(), inbox.clone(), name);
                    inbox_consumer(&inbox, &c, handler, shutdown.clone()).await
                }
                Err(e) => Err(e.into()),
            },
            Err(e) => Err(e.into()),
        };
        match result {
            Ok(()) => return Ok(()),
            // The broker went away (a restart): offsets are committed only
            // after the inbox commit, so a fresh consumer resumes safely.
            Err(e) => {
                tracing::warn!(service = %a.service, error = %e, "Kafka consumer stopped; starting a new one")
            }
        }
        if !pause(&mut delay, &shutdown).await {
            return Ok(());
        }
    }
}

async fn consume_bullmq(
    pool: sqlx::PgPool,
    inbox: Inbox,
    name: &str,
    queue: &str,
    a: &ServeArgs,
    handler: Arc<Handler>,
    shutdown: CancellationToken,
) -> Result<(), Error> {
    let opts = WorkerOptions {
        connection: RedisConnectionOptions {
            url: a.redis_url.clone(),
            ..Default::default()
        },
        concurrency: a.concurrency,
        // A killed service's jobs come back after the lock expires: keep it short.
        lock_duration: 10_000,
        stalled_interval: 5_000,
        drain_delay: 1,
        ..Default::default()
    };
    let mut delay = Duration::from_millis(100);
    let worker = loop {
        match inbox_worker(
            postbox::InboxConsumer::new(pool.clone(), inbox.clone(), name),
            queue,
            handler.clone(),
            opts.clone(),
            shutdown.clone(),
        )
        .await
        {
            Ok(w) => break w,
            Err(e) => {
                tracing::warn!(service = %a.service, error = %e, "cannot start the BullMQ worker yet; retrying")
            }
        }
        if !pause(&mut delay, &shutdown).await {
            return Ok(());
        }
    };
    let _ = worker.close_timeout(Duration::from_secs(3)).run().await;
    Ok(())
}
