//! The postbox operator console: a web UI and a JSON API over one or more
//! postbox schemas (`postbox console`).
//!
//! - **Overview**: per schema and topic, pending events, the age of the
//!   oldest (lag), retrying events and dead letters; the wake-up policy and
//!   read path in force; relay instances and their partitions.
//! - **Halted keys**: keys whose next event waits out a backoff or is blocked.
//! - **Dead letters** of the relay and of consumers, grouped by error
//!   fingerprint; replay or purge one, a selection or a whole group, each
//!   confirmed with the exact count and recorded in the audit table.
//! - **API**: the same as JSON under `/api/v1/`, described by
//!   `/api/v1/openapi.json`.
//!
//! The figures come from [`ops`], which `postbox status` uses too. Who may do
//! what is in [`auth`]. Embed [`Console::router`] in your own axum server, or
//! run `postbox console`.

pub mod auth;
pub mod ops;

mod api;
mod openapi;
mod pages;
mod security;
mod web;

pub use ops::OpsError;

use auth::{Signer, Users};
use postbox::SchemaName;
use sqlx::PgPool;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

/// What the console serves, and to whom.
pub struct Options {
    /// The schemas it shows (at least one).
    pub schemas: Vec<SchemaName>,
    /// Who may sign in.
    pub users: Users,
    /// The path prefix it is served under behind a reverse proxy (`/postbox`),
    /// or empty.
    pub base_path: String,
}

/// Options that cannot work.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// No user: nobody could sign in.
    #[error("no console users: give at least one `name role token` line (--users-file or POSTBOX_CONSOLE_USERS)")]
    NoUsers,
    /// No schema.
    #[error("no schema to show: give --schema")]
    NoSchemas,
    /// A base path the console cannot be mounted at.
    #[error("base path {0:?} must start with / and not end with one (e.g. /postbox)")]
    BasePath(String),
}

/// A running console's state; cheap to clone.
#[derive(Clone)]
pub struct Console(Arc<Inner>);

struct Inner {
    pool: PgPool,
    schemas: Vec<SchemaName>,
    users: Users,
    signer: Signer,
    base: String,
}

impl Console {
    /// A console reading through `pool`.
    pub fn new(pool: PgPool, options: Options) -> Result<Console, ConfigError> {
        if options.users.is_empty() {
            return Err(ConfigError::NoUsers);
        }
        if options.schemas.is_empty() {
            return Err(ConfigError::NoSchemas);
        }
        let base = options.base_path;
        if !base.is_empty()
            && (!base.starts_with('/') || base.ends_with('/') || base.contains("//"))
        {
            return Err(ConfigError::BasePath(base));
        }
        Ok(Console(Arc::new(Inner {
            pool,
            schemas: options.schemas,
            users: options.users,
            signer: Signer::random(),
            base,
        })))
    }

    /// The pages and the API, under the base path.
    pub fn router(&self) -> axum::Router {
        let inner = axum::Router::new()
            .merge(api::routes())
            .merge(pages::routes())
            .with_state(self.clone())
            .layer(axum::middleware::map_response(security::headers));
        let base = self.0.base.clone();
        if base.is_empty() {
            return inner;
        }
        // `/postbox/` as well as `/postbox`: the nested home is the latter.
        let home = base.clone();
        axum::Router::new().nest(&base, inner).route(
            &format!("{base}/"),
            axum::routing::get(move || async move { axum::response::Redirect::permanent(&home) }),
        )
    }

    /// Serve on `listener` until `shutdown`.
    pub async fn serve(
        &self,
        listener: tokio::net::TcpListener,
        shutdown: CancellationToken,
    ) -> std::io::Result<()> {
        axum::serve(listener, self.router())
            .with_graceful_shutdown(shutdown.cancelled_owned())
            .await
    }

    /// The overview's path: `/`, or the base path itself.
    fn home(&self) -> &str {
        if self.0.base.is_empty() {
            "/"
        } else {
            &self.0.base
        }
    }

    fn schema(&self, name: &str) -> Result<&SchemaName, web::Failure> {
        self.0
            .schemas
            .iter()
            .find(|s| s.as_str() == name)
            .ok_or_else(|| {
                let served: Vec<&str> = self.0.schemas.iter().map(SchemaName::as_str).collect();
                web::Failure::not_found(format!(
                    "schema {name:?} is not served by this console (it serves {})",
                    served.join(", ")
                ))
            })
    }
}
