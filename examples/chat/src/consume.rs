//! The consumer of a chat service's queue, over the broker it was started
//! with. Each runs in the background and reconnects, so the service comes up
//! (and keeps its HTTP API) while the broker is down; each puts the peer's
//! messages through the one inbox loop with the same [`Receiver`].

use crate::receiver::Receiver;
use crate::service::{Args, Broker, Mode, Svc};
use postbox::{Inbox, InboxConsumer, SchemaName};
use postbox_bullmq::bullmq::options::RedisConnectionOptions;
use postbox_bullmq::bullmq::{Job, WorkerOptions};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// Run the consumer of this service's queue until shutdown.
pub(crate) async fn run(svc: Arc<Svc>, a: Args, schema: SchemaName, shutdown: CancellationToken) {
    let queue = crate::model::queue_for(schema.as_str());
    let inbox = match Inbox::new(schema.as_str()) {
        Ok(inbox) => InboxConsumer::new(
            svc.pool.clone(),
            inbox.statements(svc.statements),
            &format!("chat-{}", a.service),
        ),
        Err(e) => {
            tracing::error!(error = %e, "bad schema name");
            return;
        }
    };
    let handler = Receiver(svc.clone());
    match a.broker.broker {
        Broker::Bullmq => bullmq(svc, &a, &queue, inbox, handler, shutdown).await,
        Broker::Rabbitmq => {
            retrying("RabbitMQ", &shutdown, || {
                rabbitmq(&a.broker.rabbitmq_url, &queue, &inbox, &handler, &shutdown)
            })
            .await
        }
        Broker::Nats => {
            let ack_wait = Duration::from_millis(a.lock_duration_ms);
            retrying("NATS", &shutdown, || {
                nats(
                    &a.broker.nats_url,
                    &queue,
                    ack_wait,
                    &inbox,
                    &handler,
                    &shutdown,
                )
            })
            .await
        }
    }
}

/// Run `consume` until it returns `Ok` (shutdown); after an error (broker
/// down, connection lost) start it again with a growing pause.
async fn retrying<F, Fut>(broker: &str, shutdown: &CancellationToken, mut consume: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<(), postbox::BoxError>>,
{
    let mut delay = Duration::from_millis(100);
    loop {
        match consume().await {
            Ok(()) => return,
            Err(e) => {
                tracing::warn!(error = %e, "{broker} consumer stopped; reconnecting");
                tokio::select! {
                    _ = shutdown.cancelled() => return,
                    _ = tokio::time::sleep(delay) => {}
                }
                delay = (delay * 2).min(Duration::from_secs(2));
            }
        }
    }
}

/// The queue's exchange (named like the queue, which is the relay's topic)
/// and the queue are declared by the consumer that owns them.
async fn rabbitmq(
    url: &str,
    queue: &str,
    inbox: &InboxConsumer,
    handler: &Receiver,
    shutdown: &CancellationToken,
) -> Result<(), postbox::BoxError> {
    use postbox_rabbitmq::lapin::{Connection, ConnectionProperties};
    let conn = Connection::connect(url, ConnectionProperties::default()).await?;
    let channel = conn.create_channel().await?;
    postbox_rabbitmq::declare(&channel, queue, queue).await?;
    let options = postbox_rabbitmq::ConsumerOptions::default();
    let done = postbox_rabbitmq::inbox_consumer(
        inbox,
        &channel,
        queue,
        handler,
        options,
        shutdown.clone(),
    )
    .await;
    let _ = conn.close(200, "shutting down".into()).await;
    done
}

/// A stream per queue (named like it, for the subject the relay publishes
/// to) and a durable pull consumer on it, created by the consuming service.
async fn nats(
    url: &str,
    queue: &str,
    ack_wait: Duration,
    inbox: &InboxConsumer,
    handler: &Receiver,
    shutdown: &CancellationToken,
) -> Result<(), postbox::BoxError> {
    use postbox_nats::async_nats::jetstream;
    let client = postbox_nats::async_nats::connect(url).await?;
    let js = jetstream::new(client);
    let stream = js
        .get_or_create_stream(jetstream::stream::Config {
            name: queue.to_owned(),
            subjects: vec![queue.to_owned()],
            storage: jetstream::stream::StorageType::File,
            ..Default::default()
        })
        .await?;
    let config = jetstream::consumer::pull::Config {
        ack_wait,
        ..postbox_nats::consumer_config("chat")
    };
    let consumer = stream.get_or_create_consumer("chat", config).await?;
    postbox_nats::inbox_consumer(inbox, &consumer, handler, shutdown.clone()).await
}

async fn bullmq(
    svc: Arc<Svc>,
    a: &Args,
    queue: &str,
    inbox: InboxConsumer,
    handler: Receiver,
    shutdown: CancellationToken,
) {
    let opts = WorkerOptions {
        connection: RedisConnectionOptions {
            url: a.broker.redis_url.clone(),
            ..Default::default()
        },
        lock_duration: a.lock_duration_ms,
        stalled_interval: a.lock_duration_ms.min(30_000),
        drain_delay: 1,
        ..Default::default()
    };
    let mut delay = Duration::from_millis(100);
    let worker = loop {
        let started = match svc.mode {
            Mode::V2 => postbox_bullmq::inbox_worker(
                inbox.clone(),
                queue,
                handler.clone(),
                opts.clone(),
                shutdown.clone(),
            )
            .await
            .map(Running::Inbox),
            Mode::V1 => {
                let s = svc.clone();
                postbox_bullmq::bullmq::Worker::with_options(
                    queue,
                    move |job: Job, _t| {
                        let s = s.clone();
                        async move {
                            crate::naive::receive_naive(&s, &job).await.map_err(|e| {
                                postbox_bullmq::bullmq::Error::ProcessingError(e.to_string())
                            })?;
                            Ok(serde_json::Value::Null)
                        }
                    },
                    opts.clone(),
                )
                .await
                .map(Running::Naive)
                .map_err(postbox_bullmq::InboxWorkerError::from)
            }
        };
        match started {
            Ok(w) => break w,
            Err(e) => {
                tracing::warn!(error = %e, "cannot start the BullMQ worker yet; retrying");
                tokio::select! {
                    _ = shutdown.cancelled() => return,
                    _ = tokio::time::sleep(delay) => {}
                }
                delay = (delay * 2).min(Duration::from_secs(2));
            }
        }
    };
    // A deploy: the job in hand finishes (or, if cut off, is redelivered after its lock expires).
    // Bounded: with Redis down the worker cannot finish anything anyway.
    let closing = Duration::from_secs(3);
    let _ = match worker {
        Running::Inbox(w) => w.close_timeout(closing).run().await,
        Running::Naive(w) => {
            shutdown.cancelled().await;
            w.close(closing.as_millis() as u64).await
        }
    };
}

/// The BullMQ consumer of either mode, once started.
enum Running {
    /// v2: through the inbox (serves replays of dead letters until shutdown).
    Inbox(postbox_bullmq::InboxWorker<Receiver>),
    /// v1: a plain BullMQ worker.
    Naive(postbox_bullmq::bullmq::Worker),
}
