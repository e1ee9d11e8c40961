//! Relay drain: pre-filled events → BullMQ, Redis Streams, webhooks (a
//! local receiver answering 200 at once), Kafka, RabbitMQ and NATS JetStream, events/s, next to the SQL-only claim+mark rate (a sink that
//! acknowledges at once) and each broker's raw write rate (the same messages
//! with the same acknowledgements, written without PostgreSQL). One file
//! per broker beside this one.

mod bullmq;
mod kafka;
mod nats;
mod rabbitmq;
mod redis_streams;
mod sqs;
mod webhook;

use super::cpu;
use super::report::Section;
use super::{Ctx, NullSink};
use crate::BenchError;
use postbox::migrate::WakeUp;
use postbox_bullmq::{BullmqConfig, BullmqSink, PublishMode};
use postbox_relay::{Config, Delivery, Destination, Relay, Secret, SentRows};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

const SQL_ONLY: &str = "SQL-only claim+mark";
const SQL_ONLY_DELETE: &str = "SQL-only claim+delete (sent = delete)";
const BULLMQ_DELETE: &str = "relay → BullMQ (transaction, sent = delete)";
const RAW_BULLMQ: &str = "raw BullMQ add, no PostgreSQL";
const RAW_BULLMQ_TX: &str = "raw BullMQ transaction, no PostgreSQL";
const BULLMQ: &str = "relay → BullMQ (transaction)";
const BULLMQ_WAVES: &str = "relay → BullMQ (waves)";
const RAW_KAFKA: &str = "raw Kafka produce, no PostgreSQL";
const KAFKA: &str = "relay → Kafka (transaction)";
const KAFKA_WAVES: &str = "relay → Kafka (waves)";
const RAW_RABBITMQ: &str = "raw RabbitMQ publish, no PostgreSQL";
const RABBITMQ: &str = "relay → RabbitMQ";
const RAW_STREAMS: &str = "raw Redis XADD, no PostgreSQL";
const STREAMS: &str = "relay → Redis Streams (script)";
const STREAMS_WAVES: &str = "relay → Redis Streams (waves)";
const RAW_WEBHOOK: &str = "raw signed POST, no PostgreSQL";
const WEBHOOK: &str = "relay → webhook";
const RAW_SQS: &str = "raw SQS SendMessageBatch, no PostgreSQL";
const SQS: &str = "relay → SQS FIFO";
const RAW_NATS: &str = "raw JetStream publish, no PostgreSQL";
const NATS: &str = "relay → NATS JetStream";
/// The event name and payload every row and raw message carries.
pub(super) const EVENT: &str = "bench.event";
pub(super) const BODY: &str = "hello from the bench";

pub async fn run(ctx: &Ctx) -> Result<Section, BenchError> {
    let p = &ctx.p;
    println!(
        "Relay drain: {} events over {} keys, batch {}, {} workers, {} cores",
        p.events, p.keys, p.relay.batch_size, p.relay.workers, ctx.cores
    );
    let (mut sql_only, mut sql_only_delete, mut bullmq_delete) =
        (Vec::new(), Vec::new(), Vec::new());
    let (mut bullmq, mut raw_bullmq) = (Vec::new(), Vec::new());
    let (mut bullmq_waves, mut raw_bullmq_tx) = (Vec::new(), Vec::new());
    let (mut kafka, mut kafka_waves, mut raw_kafka) = (Vec::new(), Vec::new(), Vec::new());
    let (mut rabbit, mut raw_rabbit) = (Vec::new(), Vec::new());
    let (mut nats, mut raw_nats) = (Vec::new(), Vec::new());
    let (mut streams, mut streams_waves, mut raw_streams) = (Vec::new(), Vec::new(), Vec::new());
    let (mut hooks, mut raw_hooks) = (Vec::new(), Vec::new());
    let (mut sqs_rows, mut raw_sqs) = (Vec::new(), Vec::new());
    for rep in 1..=p.reps {
        let r = drain(ctx, Arc::new(NullSink), "bench").await?;
        sql_only.push(say(rep, SQL_ONLY, r));
        let r = drain_with(ctx, Arc::new(NullSink), "bench", SentRows::Delete).await?;
        sql_only_delete.push(say(rep, SQL_ONLY_DELETE, r));

        for (publish, sent, what, rates) in [
            (
                PublishMode::Transaction,
                SentRows::Mark,
                BULLMQ,
                &mut bullmq,
            ),
            (
                PublishMode::Waves,
                SentRows::Mark,
                BULLMQ_WAVES,
                &mut bullmq_waves,
            ),
            (
                PublishMode::Transaction,
                SentRows::Delete,
                BULLMQ_DELETE,
                &mut bullmq_delete,
            ),
        ] {
            let queue = ctx.queue_name(&format!("drain-{publish:?}-{sent:?}-{rep}").to_lowercase());
            let sink = BullmqSink::new(BullmqConfig {
                redis_url: Secret::new(p.redis_url.clone()),
                publish,
                ..Default::default()
            })?;
            let r = drain_with(ctx, Arc::new(Delivery::new(sink)), &queue, sent).await?;
            ctx.obliterate(&queue).await?;
            rates.push(say(rep, what, r));
        }

        let queue = ctx.queue_name(&format!("raw-{rep}"));
        let r = bullmq::raw_rate(ctx, &queue).await?;
        ctx.obliterate(&queue).await?;
        raw_bullmq.push(say(rep, RAW_BULLMQ, r));

        let queue = ctx.queue_name(&format!("raw-tx-{rep}"));
        let r = bullmq::raw_transaction_rate(ctx, &queue).await?;
        ctx.obliterate(&queue).await?;
        raw_bullmq_tx.push(say(rep, RAW_BULLMQ_TX, r));

        let (relayed, waves, raw) = redis_streams::rep(ctx, &p.redis_url, rep).await?;
        streams.push(say(rep, STREAMS, relayed));
        streams_waves.push(say(rep, STREAMS_WAVES, waves));
        raw_streams.push(say(rep, RAW_STREAMS, raw));

        let (relayed, raw) = webhook::rep(ctx, rep).await?;
        hooks.push(say(rep, WEBHOOK, relayed));
        raw_hooks.push(say(rep, RAW_WEBHOOK, raw));

        if let Some(brokers) = &p.kafka_brokers {
            let (relayed, waves, raw) = kafka::rep(ctx, brokers, rep).await?;
            kafka.push(say(rep, KAFKA, relayed));
            kafka_waves.push(say(rep, KAFKA_WAVES, waves));
            raw_kafka.push(say(rep, RAW_KAFKA, raw));
        }

        if let Some(url) = &p.rabbitmq_url {
            let (relayed, raw) = rabbitmq::rep(ctx, url, rep).await?;
            rabbit.push(say(rep, RABBITMQ, relayed));
            raw_rabbit.push(say(rep, RAW_RABBITMQ, raw));
        }

        if let Some(endpoint) = &p.sqs_endpoint_url {
            let (relayed, raw) = sqs::rep(ctx, endpoint, &p.sqs_region, rep).await?;
            sqs_rows.push(say(rep, SQS, relayed));
            raw_sqs.push(say(rep, RAW_SQS, raw));
        }

        if let Some(url) = &p.nats_url {
            let (relayed, raw) = nats::rep(ctx, url, rep).await?;
            nats.push(say(rep, NATS, relayed));
            raw_nats.push(say(rep, RAW_NATS, raw));
        }
    }
    let mut s = Section::new(
        &format!(
            "Relay drain: {} events, batch {}, {} workers",
            p.events, p.relay.batch_size, p.relay.workers
        ),
        "events/s",
    );
    s.baseline(SQL_ONLY, sql_only);
    s.baseline(SQL_ONLY_DELETE, sql_only_delete);
    s.baseline(RAW_BULLMQ, raw_bullmq);
    s.baseline(RAW_BULLMQ_TX, raw_bullmq_tx);
    s.measured(BULLMQ, bullmq, &[SQL_ONLY, RAW_BULLMQ, RAW_BULLMQ_TX]);
    s.measured(BULLMQ_WAVES, bullmq_waves, &[SQL_ONLY, RAW_BULLMQ]);
    s.measured(
        BULLMQ_DELETE,
        bullmq_delete,
        &[SQL_ONLY_DELETE, RAW_BULLMQ, RAW_BULLMQ_TX],
    );
    s.baseline(RAW_STREAMS, raw_streams);
    s.measured(STREAMS, streams, &[SQL_ONLY, RAW_STREAMS]);
    s.measured(STREAMS_WAVES, streams_waves, &[SQL_ONLY, RAW_STREAMS]);
    s.baseline(RAW_WEBHOOK, raw_hooks);
    s.measured(WEBHOOK, hooks, &[SQL_ONLY, RAW_WEBHOOK]);
    if p.kafka_brokers.is_some() {
        s.baseline(RAW_KAFKA, raw_kafka);
        s.measured(KAFKA, kafka, &[SQL_ONLY, RAW_KAFKA]);
        s.measured(KAFKA_WAVES, kafka_waves, &[SQL_ONLY, RAW_KAFKA]);
    } else {
        s.skipped
            .push("relay → Kafka and raw Kafka produce: no --kafka-brokers".into());
    }
    if p.rabbitmq_url.is_some() {
        s.baseline(RAW_RABBITMQ, raw_rabbit);
        s.measured(RABBITMQ, rabbit, &[SQL_ONLY, RAW_RABBITMQ]);
    } else {
        s.skipped
            .push("relay → RabbitMQ and raw RabbitMQ publish: no --rabbitmq-url".into());
    }
    if p.sqs_endpoint_url.is_some() {
        s.baseline(RAW_SQS, raw_sqs);
        s.measured(SQS, sqs_rows, &[SQL_ONLY, RAW_SQS]);
    } else {
        s.skipped
            .push("relay → SQS and raw SendMessageBatch: no --sqs-endpoint-url".into());
    }
    if p.nats_url.is_some() {
        s.baseline(RAW_NATS, raw_nats);
        s.measured(NATS, nats, &[SQL_ONLY, RAW_NATS]);
    } else {
        s.skipped
            .push("relay → NATS JetStream and raw JetStream publish: no --nats-url".into());
    }
    s.print();
    Ok(s)
}

/// Print one repetition's rate and where the CPU went; the rate, for the table.
fn say(rep: usize, what: &str, m: cpu::Measured) -> f64 {
    println!("  rep {rep}: {what:<38} {:>9.0} events/s", m.rate);
    println!("         {}", m.cpu);
    m.rate
}

/// Pre-fill a fresh schema, start a relay, time until every row is published.
pub(super) async fn drain(
    ctx: &Ctx,
    sink: Arc<dyn Destination>,
    topic: &str,
) -> Result<cpu::Measured, BenchError> {
    drain_with(ctx, sink, topic, SentRows::Mark).await
}

/// [`drain`] with delivered rows marked or deleted (`sent`).
async fn drain_with(
    ctx: &Ctx,
    sink: Arc<dyn Destination>,
    topic: &str,
    sent: SentRows,
) -> Result<cpu::Measured, BenchError> {
    let p = &ctx.p;
    let schema = ctx.schema("drain", WakeUp::Off).await?;
    sqlx::query(&format!(
        "INSERT INTO {schema}.outbox (topic, event, key, payload)
         SELECT $1, $2, 'key-' || (g % $3), jsonb_build_object('n', g, 'body', $4::text)
           FROM generate_series(1, $5) g"
    ))
    .bind(topic)
    .bind(EVENT)
    .bind(p.keys)
    .bind(BODY)
    .bind(p.events)
    .execute(&ctx.pool)
    .await?;
    // Fresh statistics and visibility map, as a table in steady use would have.
    sqlx::raw_sql(&format!("VACUUM ANALYZE {schema}.outbox"))
        .execute(&ctx.pool)
        .await?;

    let shutdown = CancellationToken::new();
    let config = Config {
        sent,
        ..ctx.relay_config(&schema, Duration::from_millis(50))
    };
    let relay = Relay::new(config, sink)?;
    let stats = relay.stats();
    let started = Instant::now();
    let task = tokio::spawn(relay.run(shutdown.clone()));
    // The clock starts once the relay owns every partition (its start-up and
    // rebalancing are not the drain rate); rows published before do not count.
    let mut from: Option<(cpu::Window, u64)> = None;
    let whole = cpu::Window::start();
    let mut timeline = Timeline {
        rss_before: rss_bytes(),
        ..Timeline::default()
    };
    loop {
        let s = stats.snapshot();
        let now = Instant::now();
        timeline.see(now - started, s.published);
        timeline.rss_peak = timeline.rss_peak.max(rss_bytes());
        if from.is_none() && s.owned_partitions >= i64::from(postbox::PARTITIONS) {
            from = Some((cpu::Window::start(), s.published));
            timeline.owned_all = Some(now - started);
        }
        if s.published >= p.events as u64 {
            break;
        }
        if task.is_finished() {
            return Err("the relay stopped during the drain benchmark".into());
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    // A backlog drained before the relay owned everything: timed from its start.
    let (window, before) = from.unwrap_or((whole, 0));
    println!("         {timeline}");
    let measured = window.finish(p.events as u64 - before);
    shutdown.cancel();
    task.await??;
    ctx.drop_schema(&schema).await?;
    Ok(measured)
}

/// When, after the relay started, it owned every partition and published its
/// first event, and the longest time no event was published during the drain:
/// a stall (partitions without an owner, a missed wake-up) shows here. Also
/// this process's resident memory before and at its peak during the drain,
/// which must not grow with the backlog.
#[derive(Default)]
struct Timeline {
    owned_all: Option<Duration>,
    first_publish: Option<Duration>,
    last_progress: Option<(Duration, u64)>,
    longest_pause: Duration,
    rss_before: u64,
    rss_peak: u64,
}

/// This process's resident set size (Linux; 0 where `/proc` is missing).
fn rss_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let kib = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
        .unwrap_or(0);
    kib * 1024
}

impl Timeline {
    fn see(&mut self, at: Duration, published: u64) {
        if published == 0 {
            return;
        }
        self.first_publish.get_or_insert(at);
        match self.last_progress {
            Some((_, n)) if n == published => {}
            Some((since, _)) => {
                self.longest_pause = self.longest_pause.max(at - since);
                self.last_progress = Some((at, published));
            }
            None => self.last_progress = Some((at, published)),
        }
    }
}

impl std::fmt::Display for Timeline {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let ms = |d: Option<Duration>| match d {
            Some(d) => format!("{:.0} ms", d.as_secs_f64() * 1000.0),
            None => "never".into(),
        };
        write!(
            f,
            "all partitions owned at {}, first event published at {}, longest pause in publishing {}, memory {} MiB before, {} MiB at the peak",
            ms(self.owned_all),
            ms(self.first_publish),
            ms(Some(self.longest_pause)),
            self.rss_before >> 20,
            self.rss_peak >> 20
        )
    }
}
