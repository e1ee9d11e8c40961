//! Pieces several benchmarks assemble: a sink that acknowledges at once, the
//! inbox consumer that records when each message's inbox row committed, a
//! relay to BullMQ, and waits for connections and partitions.

use super::Ctx;
use crate::BenchError;
use postbox::{Inbox, SchemaName};
use postbox_bullmq::{inbox_worker, BullmqConfig, BullmqSink, InboxWorker};
use postbox_relay::{
    BoxError, Config, Destination, OutboxEvent, Outcome, Relay, Secret, SinkError,
};
use sqlx::postgres::PgPoolOptions;
use sqlx::PgPool;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// Acknowledges everything at once: what is left is PostgreSQL and the relay.
pub(crate) struct NullSink;

#[async_trait::async_trait]
impl Destination for NullSink {
    fn name(&self) -> &'static str {
        "null"
    }
    async fn check(&self) -> Result<(), SinkError> {
        Ok(())
    }
    async fn publish(&self, batch: &[OutboxEvent], _: tokio::time::Instant) -> Vec<Outcome> {
        batch.iter().map(|_| Outcome::Delivered).collect()
    }
}

/// The bench consumers' effect: the inbox row alone, then `after` (the
/// latency benchmark records the instant of the inbox commit there).
pub(crate) struct InboxOnly<F>(pub F);

impl<F: Fn(&postbox::Message) + Send + Sync + 'static> postbox::Handler for InboxOnly<F> {
    async fn handle(
        &self,
        _: &mut sqlx::PgConnection,
        _: &postbox::Message,
    ) -> Result<(), BoxError> {
        Ok(())
    }
    async fn after_commit(&self, msg: &postbox::Message) {
        (self.0)(msg)
    }
}

/// Open `n` connections of `pool` at once, so that connection set-up is not measured.
pub(crate) async fn warm(pool: &PgPool, n: usize) -> Result<(), BenchError> {
    let conns = futures::future::try_join_all((0..n).map(|_| pool.acquire())).await?;
    drop(conns);
    Ok(())
}

/// Wait until the relay owns every partition: before that, rows of the
/// partitions not yet owned wait for a rebalance, which is not what is measured.
pub(crate) async fn relay_ready(stats: &postbox_relay::Stats) -> Result<(), BenchError> {
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while stats.snapshot().owned_partitions < i64::from(postbox::PARTITIONS) {
        if std::time::Instant::now() > deadline {
            return Err("the relay did not take its partitions within 20 s".into());
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    Ok(())
}

/// Wait until `count` (a statement returning one count) is 0, for `what`,
/// at most a minute: the relay has sent what a benchmark waits for.
pub(crate) async fn until_none(pool: &PgPool, count: &str, what: &str) -> Result<(), BenchError> {
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let left: i64 = sqlx::query_scalar(count).fetch_one(pool).await?;
        if left == 0 {
            return Ok(());
        }
        if std::time::Instant::now() > deadline {
            return Err(format!("{left} {what} still left after 60 s").into());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A pool of `n` connections, all opened before the measurement starts.
pub(crate) async fn pool(ctx: &Ctx, n: u32) -> Result<PgPool, BenchError> {
    let pool = PgPoolOptions::new()
        .max_connections(n)
        .connect(&ctx.p.database_url)
        .await?;
    warm(&pool, n as usize).await?;
    Ok(pool)
}

/// An inbox worker on the BullMQ queue `queue` whose effect is the inbox row
/// alone; `on_commit` sees each message once its inbox transaction has
/// committed. Close the worker, then the pool, when done.
pub(crate) async fn recording_consumer<F>(
    ctx: &Ctx,
    schema: &SchemaName,
    queue: &str,
    concurrency: usize,
    on_commit: F,
) -> Result<(InboxWorker<InboxOnly<F>>, PgPool), BenchError>
where
    F: Fn(&postbox::Message) + Send + Sync + 'static,
{
    inbox_consumer(ctx, schema, queue, concurrency, InboxOnly(on_commit)).await
}

/// An inbox worker on the BullMQ queue `queue` with `handler` (its own
/// effect and hooks, e.g. one that counts duplicates); as [`recording_consumer`].
pub(crate) async fn inbox_consumer<H: postbox::Handler>(
    ctx: &Ctx,
    schema: &SchemaName,
    queue: &str,
    concurrency: usize,
    handler: H,
) -> Result<(InboxWorker<H>, PgPool), BenchError> {
    let pool = pool(ctx, concurrency as u32 + 2).await?;
    let worker = inbox_worker(
        postbox::InboxConsumer::new(pool.clone(), Inbox::new(schema.as_str())?, "bench"),
        queue,
        handler,
        ctx.worker_options(concurrency),
        CancellationToken::new(),
    )
    .await?;
    Ok((worker, pool))
}

/// A relay of `schema` to BullMQ with the sink's defaults and the bench's
/// workers and batch size.
pub(crate) fn bullmq_relay(
    ctx: &Ctx,
    schema: &SchemaName,
    poll_interval: Duration,
) -> Result<Relay, BenchError> {
    bullmq_relay_with(ctx.relay_config(schema, poll_interval), &ctx.p.redis_url)
}

/// A relay with these settings to BullMQ at `redis_url` (e.g. through a
/// fault proxy), with the sink's defaults.
pub(crate) fn bullmq_relay_with(config: Config, redis_url: &str) -> Result<Relay, BenchError> {
    let sink = BullmqSink::new(BullmqConfig {
        redis_url: Secret::new(redis_url.to_owned()),
        ..Default::default()
    })?;
    Ok(Relay::new(
        config,
        Arc::new(postbox_relay::Delivery::new(sink)),
    )?)
}

/// Send messages `0..n` at `rate` a second from `start`, each in a
/// transaction of its own, whatever the previous ones are doing: an open
/// loop, as the latency benchmark's, so a slow pipeline shows as latency
/// rather than a slower sender.
pub(crate) async fn open_loop(
    producers: &PgPool,
    outbox: &postbox::Outbox,
    timeline: &Arc<super::latency::Timeline>,
    queue: &str,
    (rate, keys): (u64, i64),
    start: tokio::time::Instant,
    n: usize,
) -> Result<(), BenchError> {
    let mut sends = tokio::task::JoinSet::new();
    for seq in 0..n {
        tokio::time::sleep_until(start + Duration::from_secs_f64(seq as f64 / rate as f64)).await;
        let (pool, outbox, tl, queue) = (
            producers.clone(),
            outbox.clone(),
            timeline.clone(),
            queue.to_owned(),
        );
        sends.spawn(async move { tl.enqueue(&pool, &outbox, &queue, seq, keys).await });
    }
    while let Some(r) = sends.join_next().await {
        r??;
    }
    Ok(())
}
