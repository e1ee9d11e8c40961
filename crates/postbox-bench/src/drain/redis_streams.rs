//! The drain benchmark's Redis Streams rows: the relay through its sink (a
//! batch as one script, and in waves), and the same entries appended straight
//! to Redis (`XADD` pipelined per batch of the relay's size, as many lanes as
//! the relay has workers, over one multiplexed connection like the sink's).

use super::{drain, BODY, EVENT};
use crate::BenchError;
use crate::{cpu, Ctx};
use postbox_redis_streams::redis::{self, aio::MultiplexedConnection};
use postbox_redis_streams::{PublishMode, RedisStreamsConfig, RedisStreamsSink};
use postbox_relay::{Delivery, Secret};
use std::sync::Arc;

/// One repetition: (relay rate with `publish = script`, with `waves`, raw
/// rate), each into a stream of its own, deleted afterwards.
pub async fn rep(
    ctx: &Ctx,
    url: &str,
    rep: usize,
) -> Result<(cpu::Measured, cpu::Measured, cpu::Measured), BenchError> {
    let client = redis::Client::open(url)?;
    let mut conn = client.get_multiplexed_async_connection().await?;
    let script = relayed(ctx, url, &mut conn, PublishMode::Script, rep).await?;
    let waves = relayed(ctx, url, &mut conn, PublishMode::Waves, rep).await?;
    let stream = ctx.name(&format!("stream-raw-{rep}"));
    let raw = raw_rate(ctx, &conn, &stream).await;
    delete(&mut conn, &stream).await;
    Ok((script, waves, raw?))
}

/// The relay's drain through the sink with `publish`.
async fn relayed(
    ctx: &Ctx,
    url: &str,
    conn: &mut MultiplexedConnection,
    publish: PublishMode,
    rep: usize,
) -> Result<cpu::Measured, BenchError> {
    let topic = ctx.name(&format!("stream-{publish:?}-{rep}").to_lowercase());
    let sink = RedisStreamsSink::new(RedisStreamsConfig {
        url: Secret::new(url.to_owned()),
        publish,
        ..Default::default()
    })?;
    let r = drain(ctx, Arc::new(Delivery::new(sink)), &topic).await;
    delete(conn, &topic).await;
    r
}

/// Remove a bench stream; a failure only leaves it behind.
async fn delete(conn: &mut MultiplexedConnection, stream: &str) {
    let _: redis::RedisResult<()> = redis::cmd("DEL").arg(stream).query_async(conn).await;
}

async fn raw_rate(
    ctx: &Ctx,
    conn: &MultiplexedConnection,
    stream: &str,
) -> Result<cpu::Measured, BenchError> {
    let p = &ctx.p;
    let per_lane = (p.events as usize).div_ceil(p.relay.workers);
    let started = cpu::Window::start();
    let tasks = (0..p.relay.workers).map(|lane| {
        let (mut conn, stream) = (conn.clone(), stream.to_owned());
        let (batch, keys) = (p.relay.batch_size as usize, p.keys as usize);
        let first = lane * per_lane;
        let last = (first + per_lane).min(p.events as usize);
        async move {
            for from in (first..last).step_by(batch) {
                let mut pipe = redis::pipe();
                for n in from..(from + batch).min(last) {
                    let payload = serde_json::json!({ "n": n, "body": BODY }).to_string();
                    pipe.cmd("XADD")
                        .arg(&stream)
                        .arg("*")
                        .arg("id")
                        .arg(uuid::Uuid::new_v4().to_string())
                        .arg("event")
                        .arg(EVENT)
                        .arg("key")
                        .arg(format!("key-{}", n % keys))
                        .arg("payload")
                        .arg(payload);
                }
                let _: Vec<String> = pipe.query_async(&mut conn).await?;
            }
            Ok::<(), BenchError>(())
        }
    });
    for r in futures::future::join_all(tasks).await {
        r?;
    }
    Ok(started.finish(p.events as u64))
}
