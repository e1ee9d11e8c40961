//! The drain benchmark's Kafka rows: the relay through its sink (a batch as
//! one transaction, and in waves), topics made and removed per run, and the
//! raw produce rate with the sink's producer settings.

use super::{drain, BODY, EVENT};
use crate::BenchError;
use crate::{cpu, Ctx};
use futures::stream::{FuturesUnordered, StreamExt};
use postbox_kafka::rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use postbox_kafka::rdkafka::client::DefaultClientContext;
use postbox_kafka::rdkafka::config::ClientConfig;
use postbox_kafka::rdkafka::message::{Header, OwnedHeaders};
use postbox_kafka::rdkafka::producer::{DeliveryFuture, FutureProducer, FutureRecord};
use postbox_kafka::{KafkaConfig, KafkaSink, PublishMode, HEADER_EVENT, HEADER_EVENT_ID};
use postbox_relay::Delivery;
use std::sync::Arc;
use std::time::Duration;

/// One repetition: (relay rate with `publish = transaction`, with `waves`,
/// raw rate), each into a topic of its own, deleted afterwards.
pub async fn rep(
    ctx: &Ctx,
    brokers: &str,
    rep: usize,
) -> Result<(cpu::Measured, cpu::Measured, cpu::Measured), BenchError> {
    let admin = KafkaAdmin::new(brokers)?;
    let mut relayed = Vec::new();
    for publish in [PublishMode::Transaction, PublishMode::Waves] {
        let topic = admin
            .create(ctx, &format!("drain-{publish:?}-{rep}").to_lowercase())
            .await?;
        let sink = KafkaSink::new(
            KafkaConfig {
                brokers: brokers.to_owned(),
                publish,
                ..Default::default()
            },
            ctx.p.relay.publish_timeout,
        )?;
        let r = drain(ctx, Arc::new(Delivery::new(sink)), &topic).await;
        admin.delete(&topic).await;
        relayed.push(r?);
    }
    let topic = admin.create(ctx, &format!("raw-{rep}")).await?;
    let raw = raw_rate(ctx, brokers, &topic).await;
    admin.delete(&topic).await;
    let waves = relayed.pop().expect("two modes");
    Ok((relayed.pop().expect("two modes"), waves, raw?))
}

/// Partitions of the bench's Kafka topics (one per relay worker by default).
const KAFKA_PARTITIONS: i32 = 4;

/// Creates and deletes the bench's Kafka topics (brokers such as tansu do
/// not auto-create them, and the sink refuses to).
pub struct KafkaAdmin {
    brokers: String,
    client: AdminClient<DefaultClientContext>,
    opts: AdminOptions,
}

impl KafkaAdmin {
    pub fn new(brokers: &str) -> Result<Self, BenchError> {
        Ok(KafkaAdmin {
            brokers: brokers.to_owned(),
            client: ClientConfig::new()
                .set("bootstrap.servers", brokers)
                .create()?,
            opts: AdminOptions::new().operation_timeout(Some(Duration::from_secs(10))),
        })
    }

    pub async fn create(&self, ctx: &Ctx, what: &str) -> Result<String, BenchError> {
        let topic = ctx.name(what);
        let new = NewTopic::new(&topic, KAFKA_PARTITIONS, TopicReplication::Fixed(1));
        for r in self.client.create_topics([&new], &self.opts).await? {
            r.map_err(|(t, e)| format!("cannot create Kafka topic {t} at {}: {e}", self.brokers))?;
        }
        Ok(topic)
    }

    /// Best effort: a topic left behind holds only bench messages.
    pub async fn delete(&self, topic: &str) {
        if let Err(e) = self.client.delete_topics(&[topic], &self.opts).await {
            eprintln!("warning: cannot delete Kafka topic {topic}: {e}");
        }
    }
}

/// The same messages the Kafka sink would produce (key, payload value,
/// event-id and event headers) with the sink's producer settings, all
/// pipelined: what the broker takes without PostgreSQL.
pub async fn raw_rate(ctx: &Ctx, brokers: &str, topic: &str) -> Result<cpu::Measured, BenchError> {
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
    let started = cpu::Window::start();
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
    Ok(started.finish(p.events as u64))
}

type DeliveryResult = <DeliveryFuture as std::future::Future>::Output;

fn delivered(r: Option<DeliveryResult>) -> Result<(), BenchError> {
    match r {
        Some(Ok(Ok(_))) | None => Ok(()),
        Some(Ok(Err((e, _)))) => Err(format!("raw Kafka produce: {e}").into()),
        Some(Err(_)) => Err("raw Kafka produce: delivery report lost".into()),
    }
}
