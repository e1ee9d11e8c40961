//! What the commands that work on one schema's rows share: the database
//! URL and schema flags, the session they open, and a dead letter's id.

use crate::CliError;
use postbox::SchemaName;
use sqlx::PgConnection;

#[derive(clap::Args)]
pub(crate) struct SchemaArgs {
    /// PostgreSQL URL.
    #[arg(long, env = "POSTBOX_DATABASE_URL", hide_env_values = true)]
    database_url: Option<String>,
    /// Schema whose dead letters to work on (one: run the command once per schema).
    #[arg(long)]
    pub(crate) schema: String,
}

impl SchemaArgs {
    /// Validate the schema, connect, and check the schema is migrated.
    pub(crate) async fn open(&self, app: &str) -> Result<(SchemaName, PgConnection), CliError> {
        if self.schema.contains(',') {
            return Err(format!(
                "dead letters are handled one schema at a time, and --schema {:?} names several: run the command once per schema",
                self.schema
            )
            .into());
        }
        let schema = SchemaName::new(&self.schema)?;
        let mut conn = connect(self.database_url.as_deref(), app).await?;
        postbox::migrate::ensure_migrated(&mut conn, &schema).await?;
        Ok((schema, conn))
    }
}

/// Open a session named `app` (so it is not mistaken for a relay in `pg_stat_activity`).
pub(crate) async fn connect(url: Option<&str>, app: &str) -> Result<PgConnection, CliError> {
    let url = url
        .ok_or("no database: pass --database-url or set POSTBOX_DATABASE_URL (or DATABASE_URL)")?;
    let redacted = postbox_relay::Secret::new(url).redacted();
    // One server or a host list (`…@db1,db2/app?target_session_attrs=read-write`).
    let servers: postbox::Servers = url
        .parse()
        .map_err(|e| format!("invalid database URL {redacted}: {e}"))?;
    servers
        .connect(app, std::time::Duration::from_secs(10))
        .await
        .map_err(|e| {
            format!("cannot connect to PostgreSQL at {redacted}: {e}. Check the URL, that the server runs, and the credentials").into()
        })
}

/// A dead letter's id for `show`: `--id N`, as `list`, `replay` and `purge`
/// take it, or `N` alone, as earlier releases did.
#[derive(clap::Args)]
pub(crate) struct DeadLetterId {
    /// The dead letter's id, as `list` shows it.
    #[arg(
        long = "id",
        value_name = "ID",
        required_unless_present = "id_given_alone"
    )]
    id: Option<i64>,
    /// The same id without `--id`.
    #[arg(value_name = "ID", hide = true, conflicts_with = "id")]
    id_given_alone: Option<i64>,
}

impl DeadLetterId {
    pub(crate) fn get(&self) -> i64 {
        self.id.or(self.id_given_alone).expect("clap requires one")
    }
}
