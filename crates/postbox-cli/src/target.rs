//! What the commands that work on one schema's rows share: the database
//! URL and schema flags, the session they open, and a dead letter's id.

use crate::connection::{connect, DatabaseUrl, Flag};
use crate::CliError;
use postbox::SchemaName;
use sqlx::PgConnection;

#[derive(clap::Args)]
pub(crate) struct SchemaArgs {
    #[command(flatten)]
    database_url: Flag<DatabaseUrl>,
    /// Schema to work on (one: run the command once per schema).
    #[arg(long)]
    pub(crate) schema: String,
}

impl SchemaArgs {
    /// Validate the schema, connect, and check the schema is migrated.
    pub(crate) async fn open(&self, app: &str) -> Result<(SchemaName, PgConnection), CliError> {
        if self.schema.contains(',') {
            return Err(format!(
                "{app} works on one schema at a time, and --schema {:?} names several: run the command once per schema",
                self.schema
            )
            .into());
        }
        let schema = SchemaName::new(&self.schema)?;
        let mut conn = connect(self.database_url.required()?, app).await?;
        postbox::migrate::ensure_migrated(&mut conn, &schema).await?;
        Ok((schema, conn))
    }
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
