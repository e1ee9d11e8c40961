//! The drain benchmark's NATS JetStream rows: the relay through its sink,
//! and the same messages published straight to the stream with the sink's
//! settings (`Nats-Msg-Id`, PubAcks awaited per batch), as many lanes as the
//! relay has workers, over one connection like the sink's.

use super::{drain, BODY, EVENT};
use crate::BenchError;
use crate::{cpu, Ctx};
use postbox_nats::async_nats::header::{HeaderMap, NATS_MESSAGE_ID};
use postbox_nats::async_nats::jetstream::{self, stream};
use postbox_nats::{NatsConfig, NatsSink, HEADER_EVENT, HEADER_KEY};
use postbox_relay::{Delivery, Secret};
use std::sync::Arc;

/// One repetition: (relay rate, raw rate), each into a stream of its own
/// (file storage), deleted afterwards.
pub async fn rep(
    ctx: &Ctx,
    url: &str,
    rep: usize,
) -> Result<(cpu::Measured, cpu::Measured), BenchError> {
    let client = postbox_nats::async_nats::connect(url)
        .await
        .map_err(|e| format!("cannot connect to NATS (--nats-url): {e}"))?;
    let js = jetstream::new(client);

    let topic = ctx.name(&format!("nats-{rep}"));
    create(&js, &topic).await?;
    let sink = NatsSink::new(NatsConfig {
        url: Secret::new(url.to_owned()),
        ..Default::default()
    })?;
    let relayed = drain(ctx, Arc::new(Delivery::new(sink)), &topic).await;
    let _ = js.delete_stream(&topic).await;
    let relayed = relayed?;

    let topic = ctx.name(&format!("nats-raw-{rep}"));
    create(&js, &topic).await?;
    let raw = raw_rate(ctx, &js, &topic).await;
    let _ = js.delete_stream(&topic).await;
    Ok((relayed, raw?))
}

async fn create(js: &jetstream::Context, name: &str) -> Result<(), BenchError> {
    js.create_stream(stream::Config {
        name: name.to_owned(),
        subjects: vec![name.to_owned()],
        storage: stream::StorageType::File,
        ..Default::default()
    })
    .await
    .map_err(|e| format!("cannot create JetStream stream {name}: {e}"))?;
    Ok(())
}

async fn raw_rate(
    ctx: &Ctx,
    js: &jetstream::Context,
    subject: &str,
) -> Result<cpu::Measured, BenchError> {
    let p = &ctx.p;
    let per_lane = (p.events as usize).div_ceil(p.relay.workers);
    let started = cpu::Window::start();
    let tasks = (0..p.relay.workers).map(|lane| {
        let (js, subject) = (js.clone(), subject.to_owned());
        let (batch, keys) = (p.relay.batch_size as usize, p.keys as usize);
        let first = lane * per_lane;
        let last = (first + per_lane).min(p.events as usize);
        async move {
            for from in (first..last).step_by(batch) {
                let mut acks = Vec::with_capacity(batch);
                for n in from..(from + batch).min(last) {
                    let mut headers = HeaderMap::new();
                    headers.insert(NATS_MESSAGE_ID, uuid::Uuid::new_v4().to_string().as_str());
                    headers.insert(HEADER_EVENT, EVENT);
                    headers.insert(HEADER_KEY, format!("key-{}", n % keys).as_str());
                    let body =
                        serde_json::to_vec(&serde_json::json!({ "n": n, "body": BODY })).unwrap();
                    acks.push(
                        js.publish_with_headers(subject.clone(), headers, body.into())
                            .await
                            .map_err(|e| format!("raw JetStream publish: {e}"))?,
                    );
                }
                for ack in acks {
                    ack.await
                        .map_err(|e| format!("raw JetStream publish: {e}"))?;
                }
            }
            Ok::<(), BenchError>(())
        }
    });
    for r in futures::future::join_all(tasks).await {
        r?;
    }
    Ok(started.finish(p.events as u64))
}
