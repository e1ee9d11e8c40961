//! The drain's NATS JetStream destination: a file-backed stream of its own
//! per run, whose one subject is the topic, deleted afterwards.

use super::broker::{given, Broker, Opened};
use crate::{BenchError, Ctx, Params};
use postbox_nats::async_nats::jetstream::{self, stream};
use postbox_nats::NatsConfig;
use postbox_relay::{Secret, SinkConfig};

struct Nats {
    url: String,
}

pub(super) fn broker(p: &Params) -> Result<Box<dyn Broker>, &'static str> {
    Ok(Box::new(Nats {
        url: given(&p.nats_url, "--nats-url")?,
    }))
}

#[async_trait::async_trait]
impl Broker for Nats {
    async fn open<'a>(&self, ctx: &'a Ctx, what: &str) -> Result<Opened<'a>, BenchError> {
        let topic = ctx.name(what);
        let client = postbox_nats::async_nats::connect(&self.url)
            .await
            .map_err(|e| format!("cannot connect to NATS (--nats-url): {e}"))?;
        let js = jetstream::new(client);
        js.create_stream(stream::Config {
            name: topic.clone(),
            subjects: vec![topic.clone()],
            storage: stream::StorageType::File,
            ..Default::default()
        })
        .await
        .map_err(|e| format!("cannot create JetStream stream {topic}: {e}"))?;
        let sink = NatsConfig {
            url: Secret::new(self.url.clone()),
            ..Default::default()
        }
        .build(&ctx.p.relay)?;
        let name = topic.clone();
        Ok(Opened {
            topic,
            sink,
            close: Box::pin(async move {
                js.delete_stream(&name).await?;
                Ok(())
            }),
        })
    }
}
