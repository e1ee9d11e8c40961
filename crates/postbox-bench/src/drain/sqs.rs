//! The drain benchmark's SQS rows: the relay through its sink into a FIFO
//! queue, and the same messages sent straight with `SendMessageBatch` (10
//! per call, group = key, deduplication id = a fresh id, as many calls in
//! flight as the relay has workers), both to the endpoint given (a local
//! SQS-compatible server, or AWS).

use super::{drain, BODY, EVENT};
use crate::BenchError;
use crate::{cpu, Ctx};
use postbox_relay::Delivery;
use postbox_sqs::aws_sdk_sqs;
use postbox_sqs::{SqsConfig, SqsSink};
use std::sync::Arc;

/// One repetition: (relay rate, raw rate), each into a FIFO queue of its
/// own, deleted afterwards.
pub async fn rep(
    ctx: &Ctx,
    endpoint: &str,
    region: &str,
    rep: usize,
) -> Result<(cpu::Measured, cpu::Measured), BenchError> {
    let config = postbox_sqs::sdk_config(Some(region), Some(endpoint)).await;
    let client = aws_sdk_sqs::Client::new(&config);

    let topic = ctx.name(&format!("sqs-{rep}"));
    let queue = create(&client, &topic).await?;
    let base = queue
        .rsplit_once('/')
        .map_or(queue.as_str(), |(b, _)| b)
        .to_owned();
    let sink = SqsSink::new(SqsConfig {
        queue_url: format!("{base}/{{topic}}.fifo"),
        region: Some(region.to_owned()),
        endpoint_url: Some(endpoint.to_owned()),
        ..Default::default()
    })?;
    let relayed = drain(ctx, Arc::new(Delivery::new(sink)), &topic).await;
    let _ = client.delete_queue().queue_url(&queue).send().await;

    let raw_queue = create(&client, &ctx.name(&format!("sqs-raw-{rep}"))).await?;
    let raw = raw_rate(ctx, &client, &raw_queue).await;
    let _ = client.delete_queue().queue_url(&raw_queue).send().await;
    Ok((relayed?, raw?))
}

async fn create(client: &aws_sdk_sqs::Client, name: &str) -> Result<String, BenchError> {
    let out = client
        .create_queue()
        .queue_name(format!("{name}.fifo"))
        .attributes(aws_sdk_sqs::types::QueueAttributeName::FifoQueue, "true")
        .send()
        .await
        .map_err(|e| {
            format!(
                "cannot create SQS queue {name}.fifo: {}",
                aws_sdk_sqs::error::DisplayErrorContext(&e)
            )
        })?;
    Ok(out.queue_url().unwrap_or_default().to_owned())
}

async fn raw_rate(
    ctx: &Ctx,
    client: &aws_sdk_sqs::Client,
    queue: &str,
) -> Result<cpu::Measured, BenchError> {
    use aws_sdk_sqs::types::{MessageAttributeValue, SendMessageBatchRequestEntry};
    let p = &ctx.p;
    let per_lane = (p.events as usize).div_ceil(p.relay.workers);
    let started = cpu::Window::start();
    let lanes = (0..p.relay.workers).map(|lane| {
        let (client, queue) = (client.clone(), queue.to_owned());
        let keys = p.keys as usize;
        let first = lane * per_lane;
        let last = (first + per_lane).min(p.events as usize);
        async move {
            for from in (first..last).step_by(10) {
                let entries = (from..(from + 10).min(last)).map(|n| {
                    let id = uuid::Uuid::new_v4().to_string();
                    let attr = |v: &str| {
                        MessageAttributeValue::builder()
                            .data_type("String")
                            .string_value(v)
                            .build()
                            .expect("data type set")
                    };
                    SendMessageBatchRequestEntry::builder()
                        .id(n.to_string())
                        .message_body(serde_json::json!({ "n": n, "body": BODY }).to_string())
                        .message_group_id(format!("key-{}", n % keys))
                        .message_deduplication_id(&id)
                        .message_attributes(postbox::wire::EVENT_ID, attr(&id))
                        .message_attributes(postbox::wire::EVENT, attr(EVENT))
                        .build()
                        .expect("id and body set")
                });
                let out = client
                    .send_message_batch()
                    .queue_url(&queue)
                    .set_entries(Some(entries.collect()))
                    .send()
                    .await
                    .map_err(|e| {
                        format!(
                            "raw SendMessageBatch: {}",
                            aws_sdk_sqs::error::DisplayErrorContext(&e)
                        )
                    })?;
                if !out.failed().is_empty() {
                    return Err::<(), BenchError>(
                        format!("raw SendMessageBatch: {:?}", out.failed()).into(),
                    );
                }
            }
            Ok(())
        }
    });
    for r in futures::future::join_all(lanes).await {
        r?;
    }
    Ok(started.finish(p.events as u64))
}
