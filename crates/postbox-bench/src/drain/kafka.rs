//! The drain's Kafka destination: a topic of its own per run, made and
//! deleted through the admin API (brokers such as tansu do not auto-create
//! topics, and the sink refuses to).

use super::broker::{given, Broker, Opened};
use crate::{BenchError, Ctx, Params};
use postbox_kafka::rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use postbox_kafka::rdkafka::client::DefaultClientContext;
use postbox_kafka::rdkafka::config::ClientConfig;
use postbox_kafka::KafkaConfig;
pub(super) use postbox_kafka::PublishMode;
use postbox_relay::SinkConfig;
use std::time::Duration;

/// Partitions of the bench's Kafka topics (one per relay worker by default).
const KAFKA_PARTITIONS: i32 = 4;

struct Kafka {
    brokers: String,
    publish: PublishMode,
}

pub(super) fn broker(p: &Params, publish: PublishMode) -> Result<Box<dyn Broker>, &'static str> {
    Ok(Box::new(Kafka {
        brokers: given(&p.kafka_brokers, "--kafka-brokers")?,
        publish,
    }))
}

#[async_trait::async_trait]
impl Broker for Kafka {
    async fn open<'a>(&self, ctx: &'a Ctx, what: &str) -> Result<Opened<'a>, BenchError> {
        let topic = ctx.name(what);
        let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
            .set("bootstrap.servers", &self.brokers)
            .create()?;
        let opts = AdminOptions::new().operation_timeout(Some(Duration::from_secs(10)));
        let new = NewTopic::new(&topic, KAFKA_PARTITIONS, TopicReplication::Fixed(1));
        for r in admin.create_topics([&new], &opts).await? {
            r.map_err(|(t, e)| format!("cannot create Kafka topic {t} at {}: {e}", self.brokers))?;
        }
        let sink = KafkaConfig {
            brokers: self.brokers.clone(),
            publish: self.publish,
            ..Default::default()
        }
        .build(&ctx.p.relay)?;
        let name = topic.clone();
        Ok(Opened {
            topic,
            sink,
            close: Box::pin(async move {
                admin.delete_topics(&[&name], &opts).await?;
                Ok(())
            }),
        })
    }
}
