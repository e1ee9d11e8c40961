//! The drain's BullMQ destination: a queue of its own per run on the
//! bench's Redis, obliterated afterwards.

use super::broker::{Broker, Opened};
use crate::{BenchError, Ctx, Params};
use postbox_bullmq::BullmqConfig;
pub(super) use postbox_bullmq::PublishMode;
use postbox_relay::{Secret, SinkConfig};

struct Bullmq {
    redis_url: String,
    publish: PublishMode,
}

pub(super) fn broker(p: &Params, publish: PublishMode) -> Result<Box<dyn Broker>, &'static str> {
    Ok(Box::new(Bullmq {
        redis_url: p.redis_url.clone(),
        publish,
    }))
}

#[async_trait::async_trait]
impl Broker for Bullmq {
    async fn open<'a>(&self, ctx: &'a Ctx, what: &str) -> Result<Opened<'a>, BenchError> {
        // A queue is made by its first job; this run's are obliterated at the
        // end of the run even after an error.
        let topic = ctx.queue_name(what);
        let sink = BullmqConfig {
            redis_url: Secret::new(self.redis_url.clone()),
            publish: self.publish,
            ..Default::default()
        }
        .build(&ctx.p.relay)?;
        let queue = topic.clone();
        Ok(Opened {
            topic,
            sink,
            close: Box::pin(async move { ctx.obliterate(&queue).await }),
        })
    }
}
