//! The drain benchmark's webhook rows: the relay through its sink, and the
//! same signed POSTs sent straight from an HTTP client (each awaited for its
//! 2xx, as many in flight as the sink's `concurrency` allows one
//! destination), both to a local receiver that answers 200 at once.

use super::{drain, BODY, EVENT};
use crate::BenchError;
use crate::{cpu, Ctx};
use futures::stream::{self, StreamExt, TryStreamExt};
use postbox_relay::{Delivery, Secret};
use postbox_webhook::{SigningKey, WebhookConfig, WebhookSink};
use std::sync::Arc;
use std::time::SystemTime;
use tokio_util::sync::CancellationToken;

/// A signing secret for the bench's own receiver.
const SECRET: &str = "whsec_cG9zdGJveCBiZW5jaCBzaWduaW5nIGtleSAwMQ==";

/// One repetition: (relay rate, raw rate).
pub async fn rep(ctx: &Ctx, rep: usize) -> Result<(cpu::Measured, cpu::Measured), BenchError> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let port = listener.local_addr()?.port();
    let stop = CancellationToken::new();
    let app = axum::Router::new().route(
        "/{*path}",
        axum::routing::post(|| async { axum::http::StatusCode::OK }),
    );
    let until = stop.clone().cancelled_owned();
    let server = tokio::spawn(async move {
        axum::serve(listener, app)
            .with_graceful_shutdown(until)
            .await
    });
    let config = WebhookConfig {
        url: format!("http://127.0.0.1:{port}/{{topic}}"),
        secrets: vec![Secret::new(SECRET)],
        ..Default::default()
    };
    let concurrency = config.concurrency;
    let topic = ctx.name(&format!("hook-{rep}"));
    let relayed = drain(
        ctx,
        Arc::new(Delivery::new(WebhookSink::new(config)?)),
        &topic,
    )
    .await;
    let raw = raw_rate(ctx, port, concurrency).await;
    stop.cancel();
    server.await??;
    Ok((relayed?, raw?))
}

async fn raw_rate(ctx: &Ctx, port: u16, concurrency: usize) -> Result<cpu::Measured, BenchError> {
    let p = &ctx.p;
    let client = reqwest::Client::builder().use_rustls_tls().build()?;
    let key = SigningKey::from_secret(SECRET)?;
    let url = format!("http://127.0.0.1:{port}/raw");
    let keys = p.keys as usize;
    let started = cpu::Window::start();
    // One destination: the sink's limit of `concurrency` requests in flight
    // holds for all its workers together, so it holds here for all events.
    stream::iter(0..p.events as usize)
        .map(|n| {
            let (client, key, url) = (&client, &key, &url);
            async move {
                let id = uuid::Uuid::new_v4().to_string();
                let body = serde_json::to_vec(&serde_json::json!({ "n": n, "body": BODY }))?;
                let ts = SystemTime::now()
                    .duration_since(SystemTime::UNIX_EPOCH)
                    .map_or(0, |d| d.as_secs() as i64);
                let response = client
                    .post(url.as_str())
                    .header("content-type", "application/json")
                    .header(postbox::wire::WEBHOOK_ID, &id)
                    .header(postbox::wire::WEBHOOK_TIMESTAMP, ts.to_string())
                    .header(postbox::wire::WEBHOOK_SIGNATURE, key.sign(&id, ts, &body))
                    .header(postbox::wire::EVENT, EVENT)
                    .header(postbox::wire::KEY, format!("key-{}", n % keys))
                    .body(body)
                    .send()
                    .await?;
                if !response.status().is_success() {
                    return Err::<(), BenchError>(
                        format!("raw webhook POST: HTTP {}", response.status()).into(),
                    );
                }
                Ok(())
            }
        })
        .buffer_unordered(concurrency)
        .try_collect::<Vec<()>>()
        .await?;
    Ok(started.finish(p.events as u64))
}
