//! The relay's admin port: Prometheus `/metrics`, `/healthz` (the process is
//! alive) and `/readyz` (database and broker answer, partitions owned).

use axum::http::StatusCode;
use axum::routing::get;
use axum::Router;
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use postbox_relay::Readiness;
use tokio_util::sync::CancellationToken;

/// Install the Prometheus recorder (once per process) and serve the admin routes until `shutdown`.
pub async fn serve(
    addr: &str,
    ready: Readiness,
    shutdown: CancellationToken,
) -> Result<tokio::task::JoinHandle<()>, crate::CliError> {
    let handle: PrometheusHandle = PrometheusBuilder::new()
        .set_buckets(&[
            0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
            30.0, 60.0,
        ])
        .map_err(|e| format!("metrics buckets: {e}"))?
        .install_recorder()
        .map_err(|e| format!("cannot install the metrics recorder: {e}"))?;
    let upkeep = handle.clone();
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| format!("cannot listen on admin address {addr}: {e}"))?;
    tracing::info!(
        "admin endpoints on http://{}/metrics, /healthz, /readyz",
        listener.local_addr()?
    );
    let app = Router::new()
        .route(
            "/metrics",
            get(move || {
                let h = handle.clone();
                async move { h.render() }
            }),
        )
        .route("/healthz", get(async || "ok"))
        .route(
            "/readyz",
            get(move || {
                let r = ready.clone();
                async move {
                    match r.check().await {
                        Ok(()) => (StatusCode::OK, "ready".to_owned()),
                        Err(e) => (StatusCode::SERVICE_UNAVAILABLE, e.to_string()),
                    }
                }
            }),
        );
    Ok(tokio::spawn(async move {
        let serve = axum::serve(listener, app).with_graceful_shutdown(shutdown.cancelled_owned());
        // Histogram samples wait in the recorder until a scrape or an upkeep
        // folds them into buckets: without this, nobody scraping means a
        // relay whose memory grows with every event.
        let upkeep = async {
            let mut every = tokio::time::interval(std::time::Duration::from_secs(5));
            loop {
                every.tick().await;
                upkeep.run_upkeep();
            }
        };
        tokio::select! {
            _ = serve => {}
            _ = upkeep => {}
        }
    }))
}
