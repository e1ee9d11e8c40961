//! The drain's Redis Streams destination: a stream of its own per run on the
//! bench's Redis, deleted afterwards.

use super::broker::{Broker, Opened};
use crate::{BenchError, Ctx, Params};
use postbox_redis_streams::redis;
pub(super) use postbox_redis_streams::PublishMode;
use postbox_redis_streams::RedisStreamsConfig;
use postbox_relay::cloudevents::Format;
pub(super) use postbox_relay::cloudevents::Mode;
use postbox_relay::{Secret, SinkConfig};

struct RedisStreams {
    url: String,
    publish: PublishMode,
    /// CloudEvents in this mode, or postbox's format.
    cloudevents: Option<Mode>,
}

pub(super) fn broker(
    p: &Params,
    publish: PublishMode,
    cloudevents: Option<Mode>,
) -> Result<Box<dyn Broker>, &'static str> {
    Ok(Box::new(RedisStreams {
        url: p.redis_url.clone(),
        publish,
        cloudevents,
    }))
}

#[async_trait::async_trait]
impl Broker for RedisStreams {
    async fn open<'a>(&self, ctx: &'a Ctx, what: &str) -> Result<Opened<'a>, BenchError> {
        // The sink's default stream is the topic, made by its first entry.
        let topic = ctx.name(what);
        let mut conn = redis::Client::open(self.url.as_str())?
            .get_multiplexed_async_connection()
            .await?;
        let sink = RedisStreamsConfig {
            url: Secret::new(self.url.clone()),
            publish: self.publish,
            format: match self.cloudevents {
                Some(_) => Format::Cloudevents,
                None => Format::Postbox,
            },
            cloudevents_mode: self.cloudevents.unwrap_or_default(),
            ..Default::default()
        }
        .build(&ctx.p.relay)?;
        let stream = topic.clone();
        Ok(Opened {
            topic,
            sink,
            close: Box::pin(async move {
                let _: () = redis::cmd("DEL")
                    .arg(&stream)
                    .query_async(&mut conn)
                    .await?;
                Ok(())
            }),
        })
    }
}
