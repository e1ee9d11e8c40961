//! The drain's SQS destination: a FIFO queue of its own per run at the
//! endpoint given (a local SQS-compatible server, or AWS), deleted afterwards.

use super::broker::{given, Broker, Opened};
use crate::{BenchError, Ctx, Params};
use postbox_relay::SinkConfig;
use postbox_sqs::aws_sdk_sqs::{self, error::DisplayErrorContext, types::QueueAttributeName};
use postbox_sqs::SqsConfig;

struct Sqs {
    endpoint: String,
    region: String,
}

pub(super) fn broker(p: &Params) -> Result<Box<dyn Broker>, &'static str> {
    Ok(Box::new(Sqs {
        endpoint: given(&p.sqs_endpoint_url, "--sqs-endpoint-url")?,
        region: p.sqs_region.clone(),
    }))
}

#[async_trait::async_trait]
impl Broker for Sqs {
    async fn open<'a>(&self, ctx: &'a Ctx, what: &str) -> Result<Opened<'a>, BenchError> {
        let topic = ctx.name(what);
        let config = postbox_sqs::sdk_config(Some(&self.region), Some(&self.endpoint)).await;
        let client = aws_sdk_sqs::Client::new(&config);
        let queue = client
            .create_queue()
            .queue_name(format!("{topic}.fifo"))
            .attributes(QueueAttributeName::FifoQueue, "true")
            .send()
            .await
            .map_err(|e| {
                format!(
                    "cannot create SQS queue {topic}.fifo: {}",
                    DisplayErrorContext(&e)
                )
            })?
            .queue_url()
            .unwrap_or_default()
            .to_owned();
        // The sink's URL template: the created queue's URL with the topic's place.
        let base = queue.rsplit_once('/').map_or(queue.as_str(), |(b, _)| b);
        let sink = SqsConfig {
            queue_url: format!("{base}/{{topic}}.fifo"),
            region: Some(self.region.clone()),
            endpoint_url: Some(self.endpoint.clone()),
            ..Default::default()
        }
        .build(&ctx.p.relay)?;
        Ok(Opened {
            topic,
            sink,
            close: Box::pin(async move {
                client
                    .delete_queue()
                    .queue_url(&queue)
                    .send()
                    .await
                    .map_err(|e| DisplayErrorContext(&e).to_string())?;
                Ok(())
            }),
        })
    }
}
