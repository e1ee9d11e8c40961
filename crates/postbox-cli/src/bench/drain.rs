//! Relay drain: pre-filled events → BullMQ and → Kafka, events/s, next to the
//! SQL-only claim+mark rate (a sink that acknowledges at once) and the raw
//! broker write rate (the same messages written without PostgreSQL).

use super::report::Section;
use super::{Ctx, NullSink};
use crate::CliError;
use futures::stream::{FuturesUnordered, StreamExt};
use postbox::migrate::WakeUp;
use postbox_bullmq::bullmq::BulkJob;
use postbox_bullmq::{BullmqConfig, BullmqSink, PublishMode};
use postbox_kafka::rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use postbox_kafka::rdkafka::client::DefaultClientContext;
use postbox_kafka::rdkafka::config::ClientConfig;
use postbox_kafka::rdkafka::message::{Header, OwnedHeaders};
use postbox_kafka::rdkafka::producer::{DeliveryFuture, FutureProducer, FutureRecord};
use postbox_kafka::{KafkaConfig, KafkaSink, HEADER_EVENT, HEADER_EVENT_ID};
use postbox_relay::{Delivery, Destination, Relay, Secret};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;

const SQL_ONLY: &str = "SQL-only claim+mark";
const RAW_BULLMQ: &str = "raw BullMQ add, no PostgreSQL";
const BULLMQ: &str = "relay → BullMQ (transaction)";
const BULLMQ_WAVES: &str = "relay → BullMQ (waves)";
const RAW_KAFKA: &str = "raw Kafka produce, no PostgreSQL";
/// Partitions of the bench's Kafka topics (one per relay worker by default).
const KAFKA_PARTITIONS: i32 = 4;
/// The event name and payload every row and raw message carries.
const EVENT: &str = "bench.event";
const BODY: &str = "hello from the bench";

pub async fn run(ctx: &Ctx) -> Result<Section, CliError> {
    let p = &ctx.p;
    println!(
        "Relay drain: {} events over {} keys, batch {}, {} workers, {} cores",
        p.events, p.keys, p.batch_size, p.workers, ctx.cores
    );
    let mut sql_only = Vec::new();
    let (mut bullmq, mut raw_bullmq) = (Vec::new(), Vec::new());
    let mut bullmq_waves = Vec::new();
    let (mut kafka, mut raw_kafka) = (Vec::new(), Vec::new());
    for rep in 1..=p.reps {
        let r = drain(ctx, Arc::new(NullSink), "bench").await?;
        say(rep, SQL_ONLY, r);
        sql_only.push(r);

        for (publish, what, rates) in [
            (PublishMode::Transaction, BULLMQ, &mut bullmq),
            (PublishMode::Waves, BULLMQ_WAVES, &mut bullmq_waves),
        ] {
            let queue = ctx.queue_name(&format!("drain-{publish:?}-{rep}").to_lowercase());
            let sink = BullmqSink::new(BullmqConfig {
                redis_url: Secret::new(p.redis_url.clone()),
                publish,
                ..Default::default()
            })?;
            let r = drain(ctx, Arc::new(Delivery::new(sink)), &queue).await?;
            ctx.obliterate(&queue).await?;
            say(rep, what, r);
            rates.push(r);
        }

        let queue = ctx.queue_name(&format!("raw-{rep}"));
        let r = raw_bullmq_rate(ctx, &queue).await?;
        ctx.obliterate(&queue).await?;
        say(rep, RAW_BULLMQ, r);
        raw_bullmq.push(r);

        if let Some(brokers) = &p.kafka_brokers {
            let admin = KafkaAdmin::new(brokers)?;
            let topic = admin.create(ctx, &format!("drain-{rep}")).await?;
            let sink = KafkaSink::new(KafkaConfig {
                brokers: brokers.clone(),
                ..Default::default()
            })?;
            let r = drain(ctx, Arc::new(Delivery::new(sink)), &topic).await?;
            admin.delete(&topic).await;
            say(rep, "relay → Kafka", r);
            kafka.push(r);

            let topic = admin.create(ctx, &format!("raw-{rep}")).await?;
            let r = raw_kafka_rate(ctx, brokers, &topic).await?;
            admin.delete(&topic).await;
            say(rep, RAW_KAFKA, r);
            raw_kafka.push(r);
        }
    }
    let mut s = Section::new(
        &format!(
            "Relay drain: {} events, batch {}, {} workers",
            p.events, p.batch_size, p.workers
        ),
        "events/s",
    );
    s.baseline(SQL_ONLY, sql_only);
    s.baseline(RAW_BULLMQ, raw_bullmq);
    s.measured(BULLMQ, bullmq, &[SQL_ONLY, RAW_BULLMQ]);
    s.measured(BULLMQ_WAVES, bullmq_waves, &[SQL_ONLY, RAW_BULLMQ]);
    if p.kafka_brokers.is_some() {
        s.baseline(RAW_KAFKA, raw_kafka);
        s.measured("relay → Kafka", kafka, &[SQL_ONLY, RAW_KAFKA]);
    } else {
        s.skipped
            .push("relay → Kafka and raw Kafka produce: no --kafka-brokers".into());
    }
    s.print();
    Ok(s)
}

fn say(rep: usize, what: &str, rate: f64) {
    println!("  rep {rep}: {what:<34} {rate:>9.0} events/s");
}

/// Pre-fill a fresh schema, start a relay, time until every row is published.
async fn drain(ctx: &Ctx, sink: Arc<dyn Destination>, topic: &str) -> Result<f64, CliError> {
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
    let relay = Relay::new(ctx.relay_config(&schema, Duration::from_millis(50)), sink)?;
    let stats = relay.stats();
    let started = Instant::now();
    let task = tokio::spawn(relay.run(shutdown.clone()));
    // The clock starts once the relay owns every partition (its start-up and
    // rebalancing are not the drain rate); rows published before do not count.
    let mut from: Option<(Instant, u64)> = None;
    loop {
        let s = stats.snapshot();
        if from.is_none() && s.owned_partitions >= i64::from(postbox::PARTITIONS) {
            from = Some((Instant::now(), s.published));
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
    let (t0, before) = from.unwrap_or((started, 0));
    let rate = (p.events as u64 - before) as f64 / t0.elapsed().as_secs_f64();
    shutdown.cancel();
    task.await??;
    ctx.drop_schema(&schema).await?;
    Ok(rate)
}

/// The same jobs the relay would add (event id as job id, same name and
/// data), in batches of the relay's size, as many batches in flight as the
/// relay has workers: what Redis and BullMQ's script take without PostgreSQL.
async fn raw_bullmq_rate(ctx: &Ctx, queue: &str) -> Result<f64, CliError> {
    let p = &ctx.p;
    let q = Arc::new(ctx.queue(queue).await?);
    let jobs: Vec<BulkJob> = (1..=p.events)
        .map(|n| {
            BulkJob::new(EVENT, serde_json::json!({ "n": n, "body": BODY }))
                .job_id(uuid::Uuid::new_v4().to_string())
        })
        .collect();
    let mut batches: Vec<Vec<BulkJob>> = Vec::new();
    let mut jobs = jobs.into_iter().peekable();
    while jobs.peek().is_some() {
        batches.push(jobs.by_ref().take(p.batch_size as usize).collect());
    }
    let started = Instant::now();
    let mut lanes: Vec<Vec<Vec<BulkJob>>> = (0..p.workers).map(|_| Vec::new()).collect();
    for (i, b) in batches.into_iter().enumerate() {
        lanes[i % p.workers].push(b);
    }
    let tasks = lanes.into_iter().map(|lane| {
        let q = q.clone();
        tokio::spawn(async move {
            for batch in lane {
                q.add_bulk(batch).await?;
            }
            Ok::<_, postbox_bullmq::bullmq::Error>(())
        })
    });
    for t in futures::future::join_all(tasks).await {
        t??;
    }
    Ok(p.events as f64 / started.elapsed().as_secs_f64())
}

/// Creates and deletes the bench's Kafka topics (brokers such as tansu do
/// not auto-create them, and the sink refuses to).
struct KafkaAdmin {
    brokers: String,
    client: AdminClient<DefaultClientContext>,
    opts: AdminOptions,
}

impl KafkaAdmin {
    fn new(brokers: &str) -> Result<Self, CliError> {
        Ok(KafkaAdmin {
            brokers: brokers.to_owned(),
            client: ClientConfig::new()
                .set("bootstrap.servers", brokers)
                .create()?,
            opts: AdminOptions::new().operation_timeout(Some(Duration::from_secs(10))),
        })
    }

    async fn create(&self, ctx: &Ctx, what: &str) -> Result<String, CliError> {
        let topic = ctx.name(what);
        let new = NewTopic::new(&topic, KAFKA_PARTITIONS, TopicReplication::Fixed(1));
        for r in self.client.create_topics([&new], &self.opts).await? {
            r.map_err(|(t, e)| format!("cannot create Kafka topic {t} at {}: {e}", self.brokers))?;
        }
        Ok(topic)
    }

    /// Best effort: a topic left behind holds only bench messages.
    async fn delete(&self, topic: &str) {
        if let Err(e) = self.client.delete_topics(&[topic], &self.opts).await {
            eprintln!("warning: cannot delete Kafka topic {topic}: {e}");
        }
    }
}

/// The same messages the Kafka sink would produce (key, payload value,
/// event-id and event headers) with the sink's producer settings, all
/// pipelined: what the broker takes without PostgreSQL.
async fn raw_kafka_rate(ctx: &Ctx, brokers: &str, topic: &str) -> Result<f64, CliError> {
    let p = &ctx.p;
    let producer: FutureProducer = ClientConfig::new()
        .set("bootstrap.servers", brokers)
        .set("enable.idempotence", "true")
        .set("acks", "all")
        .set("max.in.flight.requests.per.connection", "5")
        .set("linger.ms", "0")
        .set("message.timeout.ms", "30000")
        .create()?;
    let messages: Vec<(String, Vec<u8>, String)> = (1..=p.events)
        .map(|n| {
            (
                format!("key-{}", n % p.keys),
                serde_json::to_vec(&serde_json::json!({ "n": n, "body": BODY })).unwrap(),
                uuid::Uuid::new_v4().to_string(),
            )
        })
        .collect();
    // librdkafka's local queue holds 100,000 messages by default: stay under it.
    const IN_FLIGHT: usize = 50_000;
    let started = Instant::now();
    let mut inflight = FuturesUnordered::new();
    for (key, value, id) in &messages {
        let headers = OwnedHeaders::new()
            .insert(Header {
                key: HEADER_EVENT_ID,
                value: Some(id.as_bytes()),
            })
            .insert(Header {
                key: HEADER_EVENT,
                value: Some(EVENT.as_bytes()),
            });
        let record = FutureRecord::<str, [u8]>::to(topic)
            .key(key)
            .payload(value)
            .headers(headers);
        let fut = producer.send_result(record).map_err(|(e, _)| e)?;
        inflight.push(fut);
        if inflight.len() >= IN_FLIGHT {
            delivered(inflight.next().await)?;
        }
    }
    while let Some(r) = inflight.next().await {
        delivered(Some(r))?;
    }
    Ok(p.events as f64 / started.elapsed().as_secs_f64())
}

type DeliveryResult = <DeliveryFuture as std::future::Future>::Output;

fn delivered(r: Option<DeliveryResult>) -> Result<(), CliError> {
    match r {
        Some(Ok(Ok(_))) | None => Ok(()),
        Some(Ok(Err((e, _)))) => Err(format!("raw Kafka produce: {e}").into()),
        Some(Err(_)) => Err("raw Kafka produce: delivery report lost".into()),
    }
}
