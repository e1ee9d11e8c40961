//! The drain's webhook destination: a receiver of its own per run in this
//! process, answering 200 at once to every POST, stopped afterwards.

use super::broker::{Broker, Opened};
use crate::{BenchError, Ctx};
use postbox_relay::{Secret, SinkConfig};
use postbox_webhook::WebhookConfig;
use tokio_util::sync::CancellationToken;

/// A signing secret for the bench's own receiver.
const SECRET: &str = "whsec_cG9zdGJveCBiZW5jaCBzaWduaW5nIGtleSAwMQ==";

struct Webhook;

pub(super) fn broker() -> Result<Box<dyn Broker>, &'static str> {
    Ok(Box::new(Webhook))
}

#[async_trait::async_trait]
impl Broker for Webhook {
    async fn open<'a>(&self, ctx: &'a Ctx, what: &str) -> Result<Opened<'a>, BenchError> {
        let topic = ctx.name(what);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let port = listener.local_addr()?.port();
        let sink = WebhookConfig {
            url: format!("http://127.0.0.1:{port}/{{topic}}"),
            secrets: vec![Secret::new(SECRET)],
            ..Default::default()
        }
        .build(&ctx.p.relay)?;
        let app = axum::Router::new().route(
            "/{*path}",
            axum::routing::post(|| async { axum::http::StatusCode::OK }),
        );
        let stop = CancellationToken::new();
        let until = stop.clone().cancelled_owned();
        let server = tokio::spawn(async move {
            axum::serve(listener, app)
                .with_graceful_shutdown(until)
                .await
        });
        Ok(Opened {
            topic,
            sink,
            close: Box::pin(async move {
                stop.cancel();
                server.await??;
                Ok(())
            }),
        })
    }
}
