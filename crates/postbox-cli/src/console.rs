//! `postbox console`: the operator console (crates/postbox-console) on its
//! own port. Off the network by default (127.0.0.1); its users and their
//! tokens come from a file or an environment variable, never from the
//! command line, where other local users could read them.

use crate::connection::{DatabaseUrl, Flag};
use crate::CliError;
use postbox::SchemaName;
use postbox_console::auth::Users;
use postbox_console::{Console, Options};
use tokio_util::sync::CancellationToken;

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    database_url: Flag<DatabaseUrl>,
    /// Schema to show (repeat, or comma-separated, for several).
    #[arg(
        long = "schema",
        visible_alias = "schemas",
        required = true,
        value_delimiter = ','
    )]
    schemas: Vec<String>,
    /// Address to listen on. The default keeps the console off the network:
    /// put a reverse proxy with TLS in front of it to reach it from elsewhere.
    #[arg(long, env = "POSTBOX_CONSOLE_LISTEN", default_value = "127.0.0.1:8090")]
    listen: String,
    /// File of the console's users, one `name role token` line each (role
    /// `viewer` or `admin`; token the secret or `sha256:<hex>` of it).
    /// POSTBOX_CONSOLE_USERS may hold the same lines instead.
    #[arg(long, env = "POSTBOX_CONSOLE_USERS_FILE", value_name = "PATH")]
    users_file: Option<std::path::PathBuf>,
    /// Path prefix when served behind a reverse proxy at a sub-path (e.g. /postbox).
    #[arg(long, env = "POSTBOX_CONSOLE_BASE_PATH", default_value = "")]
    base_path: String,
}

fn users(a: &Args) -> Result<Users, CliError> {
    let (text, from) = match (&a.users_file, std::env::var("POSTBOX_CONSOLE_USERS")) {
        (Some(path), _) => (
            std::fs::read_to_string(path)
                .map_err(|e| format!("cannot read the users file {}: {e}", path.display()))?,
            path.display().to_string(),
        ),
        (None, Ok(text)) => (text, "POSTBOX_CONSOLE_USERS".to_owned()),
        (None, Err(_)) => {
            return Err("no console users: pass --users-file PATH (lines of `name role token`, role viewer or admin) or set POSTBOX_CONSOLE_USERS".into())
        }
    };
    let users = Users::parse(&text).map_err(|e| format!("{from}: {e}"))?;
    if users.is_empty() {
        return Err(format!("{from} lists no user: add a `name role token` line").into());
    }
    Ok(users)
}

pub async fn run(a: Args, shutdown: CancellationToken) -> Result<(), CliError> {
    let schemas = a
        .schemas
        .iter()
        .map(|s| SchemaName::new(s))
        .collect::<Result<Vec<_>, _>>()?;
    let users = users(&a)?;
    let url = a.database_url.required()?;
    let redacted = postbox_relay::Secret::new(url).redacted();
    let options: sqlx::postgres::PgConnectOptions = url
        .parse()
        .map_err(|e| format!("invalid database URL {redacted}: {e}"))?;
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(4)
        .acquire_timeout(std::time::Duration::from_secs(10))
        .connect_with(options.application_name("postbox-console"))
        .await
        .map_err(|e| format!("cannot connect to PostgreSQL at {redacted}: {e}. Check the URL, that the server runs, and the credentials"))?;
    // Refuse at start a schema the console cannot read, rather than on every page.
    {
        let mut conn = pool.acquire().await?;
        for s in &schemas {
            postbox_console::ops::status::schema_status(&mut conn, s).await?;
        }
    }
    let console = Console::new(
        pool,
        Options {
            schemas,
            users,
            base_path: a.base_path.clone(),
        },
    )?;
    let listener = tokio::net::TcpListener::bind(&a.listen)
        .await
        .map_err(|e| format!("cannot listen on {}: {e}", a.listen))?;
    tracing::info!(
        "console on http://{}{}/ (API: /api/v1/, OpenAPI: /api/v1/openapi.json)",
        listener.local_addr()?,
        a.base_path
    );
    console.serve(listener, shutdown).await?;
    tracing::info!("console stopped");
    Ok(())
}
