//! The relay as a whole: one listener, one logical-decoding session when a
//! schema has `--notify logical`, plus `workers` worker sessions per schema,
//! all stopped by one shutdown token.

use crate::{
    wake, wake_logical, worker::Worker, Config, ConfigError, Destination, SinkError, Stats,
};
use postbox::Servers;
use sqlx::Connection;
use std::collections::HashMap;
use std::sync::Arc;
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
    /// A configured schema has no outbox, or is older than this relay.
    #[error(transparent)]
    Schema(#[from] postbox::MigrateError),
    /// The relay's sessions go through a pooler in transaction mode.
    #[error("the relay's sessions to PostgreSQL at {url} go through a connection pooler in transaction mode: {evidence}. A relay keeps state in its session between transactions (advisory locks on its partitions, LISTEN, settings, prepared claims), and such a pooler hands the session to other clients after each one. Give the relay a URL to PostgreSQL itself, or through the pooler in session mode (PgBouncer: pool_mode = session for the relay's database entry); producers and consumers may keep the pooled URL")]
    Pooled {
        /// Redacted URL.
        url: String,
        /// What showed it.
        evidence: String,
    },
    /// A worker's session changed its backend between transactions.
    #[error("relay worker {worker}: its session's backend changed between two transactions (pid {before}, then {after}), as through a connection pooler in transaction mode. A relay keeps state in its session between transactions (advisory locks on its partitions, LISTEN, settings, prepared claims); it stopped rather than share partitions. Give the relay a URL to PostgreSQL itself, or through the pooler in session mode (PgBouncer: pool_mode = session for the relay's database entry)")]
    SessionMoved {
        /// `<schema>#<n>`.
        worker: String,
        /// The backend pid the session started with.
        before: i32,
        /// The one it answered from later.
        after: i32,
    },
    /// The server of the URL takes no writes.
    #[error("PostgreSQL at {url} is {why}: the relay marks or deletes the rows it sends, and cannot work on a server that takes no writes. Give it the primary's URL (or a host list with target_session_attrs=read-write)")]
    ReadOnly {
        /// Redacted URL.
        url: String,
        /// A standby, or `default_transaction_read_only`.
        why: &'static str,
    },
    /// A task of the running relay panicked: the relay stopped the others and
    /// cannot do its job.
    #[error("relay task {task} failed: {reason}; the relay stopped")]
    TaskFailed {
        /// Which task (`worker <schema>#<n>`, `maintenance`, `scheduled`, `listen`, `logical`).
        task: String,
        /// The panic message, or why its ending was unexpected.
        reason: String,
    },
}

/// Why a relay is not ready (`/readyz` answers 503 with this text).
#[derive(Debug, thiserror::Error)]
pub enum NotReady {
    /// The database did not answer `SELECT 1`.
    #[error("database unreachable: {0}")]
    Database(#[source] sqlx::Error),
    /// The broker did not answer its sink's check.
    #[error("{sink} unreachable: {source}")]
    Broker {
        /// The sink's name.
        sink: &'static str,
        /// What the check returned.
        #[source]
        source: SinkError,
    },
    /// The database or the broker gave no answer within the check's timeout.
    #[error("{what} unreachable: no answer within {after:?}")]
    NoAnswer {
        /// "database", or the sink's name.
        what: &'static str,
        /// The timeout.
        after: std::time::Duration,
    },
    /// The relay's workers own no partition yet (starting, or all taken).
    #[error("no partitions owned yet")]
    NoPartitions,
}

/// Readiness of a running relay: the database answers, the broker answers,
/// and its workers own partitions.
#[derive(Clone)]
pub struct Readiness {
    stats: Arc<Stats>,
    sink: Arc<dyn Destination>,
    servers: Arc<Servers>,
}

impl Readiness {
    /// `Ok` when ready, else what is missing.
    pub async fn check(&self) -> Result<(), NotReady> {
        let timeout = std::time::Duration::from_secs(2);
        let db = async {
            let mut c = self.servers.connect("postbox-relay:ready", timeout).await?;
            sqlx::query("SELECT 1").execute(&mut c).await?;
            let _ = c.close().await;
            Ok::<_, sqlx::Error>(())
        };
        match tokio::time::timeout(timeout, db).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return Err(NotReady::Database(e)),
            Err(_) => {
                return Err(NotReady::NoAnswer {
                    what: "database",
                    after: timeout,
                })
            }
        }
        match tokio::time::timeout(timeout, self.sink.check()).await {
            Ok(Ok(())) => {}
            Ok(Err(source)) => {
                return Err(NotReady::Broker {
                    sink: self.sink.name(),
                    source,
                })
            }
            Err(_) => {
                return Err(NotReady::NoAnswer {
                    what: self.sink.name(),
                    after: timeout,
                })
            }
        }
        if self.stats.snapshot().owned_partitions == 0 {
            return Err(NotReady::NoPartitions);
        }
        Ok(())
    }
}

/// A configured relay, ready to [`run`](Relay::run).
pub struct Relay {
    config: Config,
    servers: Arc<Servers>,
    sink: Arc<dyn Destination>,
    /// Where the sink publishes, for the broker's reachability log lines.
    target: Arc<str>,
    stats: Arc<Stats>,
    /// Each sink's health and each schema's standing (`health`).
    health: Arc<crate::health::Health>,
}

impl Relay {
    /// Validate `config` and build a relay publishing to `sink`.
    pub fn new(config: Config, sink: Arc<dyn Destination>) -> Result<Self, RelayError> {
        let schemas = config.validate()?;
        let servers = Arc::new(config.servers().map_err(|e| ConfigError {
            field: "database_url",
            reason: e.to_string(),
        })?);
        let mut health = crate::health::Health::new(&schemas);
        let target = sink.name().into();
        let sink = health.watch(sink, config.health_interval);
        Ok(Relay {
            config,
            servers,
            target,
            sink,
            stats: Arc::new(Stats::default()),
            health: Arc::new(health),
        })
    }

    /// Where the sink publishes (its address, no secrets), for the lines
    /// that say the broker became unreachable or reachable again; the sink's
    /// name when not given.
    pub fn target(mut self, target: impl Into<String>) -> Self {
        self.target = target.into().into();
        self
    }

    /// A handle that answers "is this relay ready?" while it runs.
    pub fn readiness(&self) -> Readiness {
        Readiness {
            stats: self.stats.clone(),
            sink: self.sink.clone(),
            servers: self.servers.clone(),
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
        let schemas = self.config.validate()?;
        let q = postbox::sql::Queries::new(&schemas[0]);
        let unfit = crate::session_check::check(&self.servers, &q, self.config.session_timeout)
            .await
            .map_err(|source| RelayError::Connect {
                url: url.redacted(),
                source,
            })?;
        match unfit {
            None => {}
            Some(crate::session_check::Unfit::Pooled { evidence }) => {
                return Err(RelayError::Pooled {
                    url: url.redacted(),
                    evidence,
                })
            }
            Some(crate::session_check::Unfit::ReadOnly { why }) => {
                return Err(RelayError::ReadOnly {
                    url: url.redacted(),
                    why,
                })
            }
        }
        let mut conn = self
            .servers
            .connect("postbox-relay:preflight", self.config.session_timeout)
            .await
            .map_err(|source| RelayError::Connect {
                url: url.redacted(),
                source,
            })?;
        for schema in schemas {
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
            let mut conn = self
                .servers
                .connect("postbox-relay:preflight", self.config.session_timeout)
                .await
                .map_err(connect_error)?;
            let found = wake_logical::published(&mut conn, &schemas)
                .await
                .map_err(connect_error)?;
            let _ = conn.close().await;
            found
        };
        let config = Arc::new(self.config.clone());
        // `postbox-relay:<pid>:<id>@<version>`: what `postbox status` and the
        // console show of each relay, from its sessions' application_name.
        let instance: Arc<str> = format!(
            "postbox-relay:{}:{}@{}",
            std::process::id(),
            &uuid::Uuid::new_v4().simple().to_string()[..6],
            env!("CARGO_PKG_VERSION")
        )
        .into();
        let mut tasks = Tasks::default();
        let mut wakers = HashMap::new();
        for schema in &schemas {
            wakers.insert(schema.to_string(), wake::SchemaSignals::new());
        }
        // Whether this relay takes partitions is known before its workers
        // start: one that cannot reach its broker does not take partitions
        // from relays that can (`health`).
        let mut recorder = crate::health::Recorder::new(
            config.clone(),
            self.servers.clone(),
            self.health.clone(),
            wakers.clone(),
            &instance,
        );
        crate::broker_watch::first_checks(&self.health, &config).await;
        recorder.round().await;
        tasks.spawn(
            "health".into(),
            crate::health::record(recorder, shutdown.clone()),
        );
        self.spawn_workers(&mut tasks, &config, &schemas, &wakers, &instance, &shutdown);
        tasks.spawn(
            "maintenance".into(),
            crate::maintenance::run(
                config.clone(),
                self.servers.clone(),
                schemas.clone(),
                self.stats.clone(),
                shutdown.clone(),
            ),
        );
        tasks.spawn(
            "scheduled".into(),
            crate::scheduled::run(
                config.clone(),
                self.servers.clone(),
                schemas.clone(),
                shutdown.clone(),
            ),
        );
        if !logical.is_empty() && self.servers.len() > 1 {
            tracing::warn!(schemas = ?logical, "logical wake-up follows one server, and the database URL names several: these schemas are served by polling and NOTIFY instead; use `postbox migrate --notify adaptive` for them");
        } else if !logical.is_empty() {
            let logical_wakers = logical
                .iter()
                .filter_map(|s| Some((s.to_string(), wakers.get(s.as_str())?.wake.clone())))
                .collect();
            tasks.spawn(
                "logical".into(),
                wake_logical::follow(
                    config.clone(),
                    format!("{instance}:logical"),
                    logical.clone(),
                    logical_wakers,
                    shutdown.clone(),
                ),
            );
        }
        for tracked in &self.health.sinks {
            tasks.spawn(
                format!("broker {}", tracked.health.name),
                crate::broker_watch::watch(
                    tracked.health.clone(),
                    tracked.sink.clone(),
                    self.target.clone(),
                    crate::broker_watch::check_pace(&config),
                    shutdown.clone(),
                ),
            );
        }
        // Every schema, logical ones too: no trigger NOTIFYs for those, but a
        // schema switched to a NOTIFY policy while the relay runs is served.
        tasks.spawn(
            "listen".into(),
            wake::listen(
                self.servers.clone(),
                format!("{instance}:listen"),
                wakers,
                config.session_timeout,
                shutdown.clone(),
            ),
        );
        tracing::info!(
            %instance,
            schemas = ?schemas,
            logical = ?logical,
            workers = config.workers,
            sink = self.sink.name(),
            "relay started"
        );
        let failed = tasks.join_all(&shutdown).await;
        tracing::info!("relay stopped");
        match failed {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

impl Relay {
    /// `workers` workers per schema, each schema's as a crew.
    fn spawn_workers(
        &self,
        tasks: &mut Tasks,
        config: &Arc<Config>,
        schemas: &[postbox::SchemaName],
        wakers: &HashMap<String, wake::SchemaSignals>,
        instance: &Arc<str>,
        shutdown: &CancellationToken,
    ) {
        for schema in schemas {
            let signals = &wakers[schema.as_str()];
            let crew = Arc::new(crate::worker::Crew::new(
                config,
                schema.as_str(),
                self.health.clone(),
            ));
            for n in 0..config.workers {
                let worker = Worker::new(
                    config.clone(),
                    schema.clone(),
                    n,
                    crate::worker::Parts {
                        sink: self.sink.clone(),
                        stats: self.stats.clone(),
                        instance: instance.clone(),
                        servers: self.servers.clone(),
                        crew: crew.clone(),
                        health: self.health.clone(),
                    },
                    signals.clone(),
                    shutdown.clone(),
                );
                tasks.spawn_fallible(format!("worker {schema}#{n}"), worker.run());
            }
        }
    }
}

/// The relay's tasks by name, so a failure says which one it was.
#[derive(Default)]
struct Tasks {
    set: JoinSet<Result<(), RelayError>>,
    names: HashMap<tokio::task::Id, String>,
}

impl Tasks {
    fn spawn(
        &mut self,
        name: String,
        task: impl std::future::Future<Output = ()> + Send + 'static,
    ) {
        self.spawn_fallible(name, async move {
            task.await;
            Ok(())
        });
    }

    /// A task that may end with an error nothing can heal (a worker whose
    /// session a pooler took over): the relay stops with it.
    fn spawn_fallible(
        &mut self,
        name: String,
        task: impl std::future::Future<Output = Result<(), RelayError>> + Send + 'static,
    ) {
        let id = self.set.spawn(task).id();
        self.names.insert(id, name);
    }

    /// Wait for every task. The first that panics cancels `shutdown` (the
    /// others must not run headless) and is returned as the relay's error.
    /// Tasks retry what can heal (database, broker) themselves; one may end
    /// on its own (the logical follower when no schema is published any more).
    async fn join_all(mut self, shutdown: &CancellationToken) -> Option<RelayError> {
        let mut failed = None;
        while let Some(res) = self.set.join_next_with_id().await {
            let (id, reason) = match res {
                Ok((id, Ok(()))) => {
                    self.names.remove(&id);
                    continue;
                }
                Ok((id, Err(e))) => {
                    let task = self.names.remove(&id).unwrap_or_else(|| "unknown".into());
                    tracing::error!(%task, error = %e, "relay task failed; stopping the relay");
                    shutdown.cancel();
                    failed.get_or_insert(e);
                    continue;
                }
                Err(e) => (e.id(), panic_message(e)),
            };
            let task = self.names.remove(&id).unwrap_or_else(|| "unknown".into());
            tracing::error!(%task, %reason, "relay task failed; stopping the relay");
            shutdown.cancel();
            failed.get_or_insert(RelayError::TaskFailed { task, reason });
        }
        failed
    }
}

fn panic_message(e: tokio::task::JoinError) -> String {
    match e.try_into_panic() {
        Ok(p) => p
            .downcast_ref::<&str>()
            .map(|s| format!("panicked: {s}"))
            .or_else(|| p.downcast_ref::<String>().map(|s| format!("panicked: {s}")))
            .unwrap_or_else(|| "panicked".into()),
        Err(e) => e.to_string(),
    }
}
