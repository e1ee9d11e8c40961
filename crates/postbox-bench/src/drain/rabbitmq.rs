//! The drain benchmark's RabbitMQ rows: the relay through its sink, and the
//! same messages published straight to the broker with the sink's settings
//! (persistent, mandatory, publisher confirms awaited per batch), as many
//! channels as the relay has workers.

use super::{drain, BODY, EVENT};
use crate::BenchError;
use crate::{cpu, Ctx};
use postbox_rabbitmq::lapin::options::{
    BasicPublishOptions, ConfirmSelectOptions, ExchangeDeleteOptions, QueueDeleteOptions,
};
use postbox_rabbitmq::lapin::types::{AMQPValue, FieldTable, LongString};
use postbox_rabbitmq::lapin::{BasicProperties, Channel, Connection, ConnectionProperties};
use postbox_rabbitmq::{RabbitmqConfig, RabbitmqSink};
use postbox_relay::{Delivery, Secret};
use std::sync::Arc;

/// One repetition: (relay rate, raw rate), each into an exchange and queue
/// of its own, removed afterwards.
pub async fn rep(
    ctx: &Ctx,
    url: &str,
    rep: usize,
) -> Result<(cpu::Measured, cpu::Measured), BenchError> {
    let conn = Connection::connect(url, ConnectionProperties::default())
        .await
        .map_err(|e| format!("cannot connect to RabbitMQ (--rabbitmq-url): {e}"))?;
    let admin = conn.create_channel().await?;

    let topic = ctx.name(&format!("rabbitmq-{rep}"));
    postbox_rabbitmq::declare(&admin, &topic, &topic).await?;
    let sink = RabbitmqSink::new(RabbitmqConfig {
        url: Secret::new(url.to_owned()),
        ..Default::default()
    })?;
    let relayed = drain(ctx, Arc::new(Delivery::new(sink)), &topic).await?;
    remove(&admin, &topic).await;

    let topic = ctx.name(&format!("rabbitmq-raw-{rep}"));
    postbox_rabbitmq::declare(&admin, &topic, &topic).await?;
    let raw = raw_rate(ctx, &conn, &topic).await?;
    remove(&admin, &topic).await;
    let _ = conn.close(200, "bench done".into()).await;
    Ok((relayed, raw))
}

async fn remove(admin: &Channel, name: &str) {
    let _ = admin
        .queue_delete(name.into(), QueueDeleteOptions::default())
        .await;
    let _ = admin
        .exchange_delete(name.into(), ExchangeDeleteOptions::default())
        .await;
}

async fn raw_rate(
    ctx: &Ctx,
    conn: &Connection,
    exchange: &str,
) -> Result<cpu::Measured, BenchError> {
    let p = &ctx.p;
    let mut lanes = Vec::new();
    for _ in 0..p.relay.workers {
        let channel = conn.create_channel().await?;
        channel
            .confirm_select(ConfirmSelectOptions::default())
            .await?;
        lanes.push(channel);
    }
    let per_lane = (p.events as usize).div_ceil(p.relay.workers);
    let started = cpu::Window::start();
    let tasks = lanes.into_iter().enumerate().map(|(lane, channel)| {
        let exchange = exchange.to_owned();
        let (batch, keys) = (p.relay.batch_size as usize, p.keys as usize);
        let first = lane * per_lane;
        let last = (first + per_lane).min(p.events as usize);
        async move {
            for from in (first..last).step_by(batch) {
                let mut confirms = Vec::with_capacity(batch);
                for n in from..(from + batch).min(last) {
                    let key = format!("key-{}", n % keys);
                    let body =
                        serde_json::to_vec(&serde_json::json!({ "n": n, "body": BODY })).unwrap();
                    let mut headers = FieldTable::default();
                    headers.insert(
                        postbox::wire::KEY.into(),
                        AMQPValue::LongString(LongString::from(key.as_str())),
                    );
                    let properties = BasicProperties::default()
                        .with_message_id(uuid::Uuid::new_v4().to_string().into())
                        .with_type(EVENT.into())
                        .with_content_type("application/json".into())
                        .with_delivery_mode(2)
                        .with_headers(headers);
                    let options = BasicPublishOptions {
                        mandatory: true,
                        ..Default::default()
                    };
                    confirms.push(
                        channel
                            .basic_publish(
                                exchange.as_str().into(),
                                key.as_str().into(),
                                options,
                                &body,
                                properties,
                            )
                            .await?,
                    );
                }
                for c in confirms {
                    if !c.await?.is_ack() {
                        return Err::<(), BenchError>("raw RabbitMQ publish: nacked".into());
                    }
                }
            }
            Ok(())
        }
    });
    for r in futures::future::join_all(tasks).await {
        r?;
    }
    Ok(started.finish(p.events as u64))
}
