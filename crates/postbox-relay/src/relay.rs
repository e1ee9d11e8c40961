//! The relay as a whole: one listener, one logical-decoding session when a
//! schema has `--notify logical`, plus `workers` worker sessions per schema,
//! all stopped by one shutdown token.

use crate::{wake, wake_logical, worker::Worker, Config, ConfigError, Sink, Stats};
use sqlx::Connection;
use std::collections::HashMap;
use std::sync::Arc;
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

/// Why the relay could not start.
#[derive(Debug, thiserror::Error)]
pub enum RelayError {
    /// Bad configuration.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The database could not be reached at start-up.
    #[error("cannot connect to PostgreSQL at {url}: {source}. Check the URL, that the server runs, and the credentials")]
    Connect {
        /// Redacted URL.
        url: String,
        /// The driver's error.
        #[source]
        source: sqlx::Error,
    },
    /// A configured schema has no outbox.
    #[error(transparent)]
    Schema(#[from] postbox::Error),
}

/// Readiness of a running relay: the database answers, the broker answers,
/// and its workers own partitions.
#[derive(Clone)]
pub struct Readiness {
    stats: Arc<Stats>,
    sink: Arc<dyn Sink>,
    database_url: crate::Secret,
}

impl Readiness {
    /// `Ok` when ready, else what is missing.
    pub async fn check(&self) -> Result<(), String> {
        let timeout = std::time::Duration::from_secs(2);
        let db = async {
            let mut c = sqlx::PgConnection::connect(self.database_url.expose()).await?;
            sqlx::query("SELECT 1").execute(&mut c).await?;
            let _ = c.close().await;
            Ok::<_, sqlx::Error>(())
        };
        match tokio::time::timeout(timeout, db).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return Err(format!("database unreachable: {e}")),
            Err(_) => return Err("database unreachable: no answer within 2s".into()),
        }
        match tokio::time::timeout(timeout, self.sink.check()).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return Err(format!("{} unreachable: {e}", self.sink.name())),
            Err(_) => {
                return Err(format!(
                    "{} unreachable: no answer within 2s",
                    self.sink.name()
                ))
            }
        }
        if self.stats.snapshot().owned_partitions == 0 {
            return Err("no partitions owned yet".into());
        }
        Ok(())
    }
}

/// A configured relay, ready to [`run`](Relay::run).
pub struct Relay {
    config: Config,
    sink: Arc<dyn Sink>,
    stats: Arc<Stats>,
}

impl Relay {
    /// Validate `config` and build a relay publishing to `sink`.
    pub fn new(config: Config, sink: Arc<dyn Sink>) -> Result<Self, RelayError> {
        config.validate()?;
        Ok(Relay {
            config,
            sink,
            stats: Arc::new(Stats::default()),
        })
    }

    /// A handle that answers "is this relay ready?" while it runs.
    pub fn readiness(&self) -> Readiness {
        Readiness {
            stats: self.stats.clone(),
            sink: self.sink.clone(),
            database_url: self.config.database_url.clone(),
        }
    }

    /// Counters shared with the running workers.
    pub fn stats(&self) -> Arc<Stats> {
        self.stats.clone()
    }

    /// Check that the database answers and every schema is migrated. `run`
    /// calls this first; a failure here is a configuration problem, not
    /// something to retry.
    pub async fn preflight(&self) -> Result<(), RelayError> {
        let url = &self.config.database_url;
        let mut conn = sqlx::PgConnection::connect(url.expose())
            .await
            .map_err(|source| RelayError::Connect {
                url: url.redacted(),
                source,
            })?;
        for schema in self.config.validate()? {
            postbox::migrate::ensure_migrated(&mut conn, &schema).await?;
        }
        let _ = conn.close().await;
        Ok(())
    }

    /// Run until `shutdown` is cancelled: each worker then finishes the batch in
    /// flight, commits, releases its partitions and returns.
    pub async fn run(self, shutdown: CancellationToken) -> Result<(), RelayError> {
        self.preflight().await?;
        let schemas = self.config.validate()?;
        let logical = {
            let url = &self.config.database_url;
            let connect_error = |source| RelayError::Connect {
                url: url.redacted(),
                source,
            };
            let mut conn = sqlx::PgConnection::connect(url.expose())
                .await
                .map_err(connect_error)?;
            let found = wake_logical::published(&mut conn, &schemas)
                .await
                .map_err(connect_error)?;
            let _ = conn.close().await;
            found
        };
        let config = Arc::new(self.config);
        let instance: Arc<str> = format!(
            "postbox-relay:{}:{}",
            std::process::id(),
            &uuid::Uuid::new_v4().simple().to_string()[..6]
        )
        .into();
        let mut tasks = JoinSet::new();
        let mut wakers = HashMap::new();
        for schema in &schemas {
            let (tx, rx) = watch::channel(0u64);
            wakers.insert(schema.to_string(), tx);
            for n in 0..config.workers {
                let worker = Worker::new(
                    config.clone(),
                    schema.clone(),
                    n,
                    crate::worker::Parts {
                        sink: self.sink.clone(),
                        stats: self.stats.clone(),
                        instance: instance.clone(),
                    },
                    rx.clone(),
                    shutdown.clone(),
                );
                tasks.spawn(worker.run());
            }
        }
        tasks.spawn(crate::maintenance::run(
            config.clone(),
            schemas.clone(),
            shutdown.clone(),
        ));
        if !logical.is_empty() {
            let logical_wakers = logical
                .iter()
                .filter_map(|s| Some((s.to_string(), wakers.get(s.as_str())?.clone())))
                .collect();
            tasks.spawn(wake_logical::follow(
                config.clone(),
                format!("{instance}:logical"),
                logical.clone(),
                logical_wakers,
                shutdown.clone(),
            ));
        }
        // Every schema, logical ones too: no trigger NOTIFYs for those, but a
        // schema switched to a NOTIFY policy while the relay runs is served.
        tasks.spawn(wake::listen(
            config.database_url.clone(),
            format!("{instance}:listen"),
            wakers,
            shutdown.clone(),
        ));
        tracing::info!(
            %instance,
            schemas = ?schemas,
            logical = ?logical,
            workers = config.workers,
            sink = self.sink.name(),
            "relay started"
        );
        while let Some(res) = tasks.join_next().await {
            if let Err(e) = res {
                // A panicking worker must not leave the others running headless.
                tracing::error!(error = %e, "relay task failed; shutting down");
                shutdown.cancel();
            }
        }
        tracing::info!("relay stopped");
        Ok(())
    }
}
