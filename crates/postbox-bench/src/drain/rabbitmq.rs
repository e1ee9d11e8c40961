//! The drain's RabbitMQ destination: an exchange and a queue of its own per
//! run, both named after the topic (the sink's default routing), removed
//! afterwards.

use super::broker::{given, Broker, Opened};
use crate::{BenchError, Ctx, Params};
use postbox_rabbitmq::lapin::options::{ExchangeDeleteOptions, QueueDeleteOptions};
use postbox_rabbitmq::lapin::{Connection, ConnectionProperties};
use postbox_rabbitmq::RabbitmqConfig;
use postbox_relay::{Secret, SinkConfig};

struct Rabbitmq {
    url: String,
}

pub(super) fn broker(p: &Params) -> Result<Box<dyn Broker>, &'static str> {
    Ok(Box::new(Rabbitmq {
        url: given(&p.rabbitmq_url, "--rabbitmq-url")?,
    }))
}

#[async_trait::async_trait]
impl Broker for Rabbitmq {
    async fn open<'a>(&self, ctx: &'a Ctx, what: &str) -> Result<Opened<'a>, BenchError> {
        let topic = ctx.name(what);
        let conn = Connection::connect(&self.url, ConnectionProperties::default())
            .await
            .map_err(|e| format!("cannot connect to RabbitMQ (--rabbitmq-url): {e}"))?;
        let admin = conn.create_channel().await?;
        postbox_rabbitmq::declare(&admin, &topic, &topic).await?;
        let sink = RabbitmqConfig {
            url: Secret::new(self.url.clone()),
            ..Default::default()
        }
        .build(&ctx.p.relay)?;
        let name = topic.clone();
        Ok(Opened {
            topic,
            sink,
            close: Box::pin(async move {
                admin
                    .queue_delete(name.as_str().into(), QueueDeleteOptions::default())
                    .await?;
                admin
                    .exchange_delete(name.as_str().into(), ExchangeDeleteOptions::default())
                    .await?;
                conn.close(200, "bench done".into()).await?;
                Ok(())
            }),
        })
    }
}
