//! `postbox grant`: least-privilege rights for a producer, relay, consumer or console role.

use crate::connection::{connect, DatabaseUrl, Flag};
use crate::CliError;
use postbox::roles::{self, Kind};
use postbox::{RoleName, SchemaName};
use sqlx::Connection;

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    database_url: Flag<DatabaseUrl>,
    /// The postbox schema (repeat, or comma-separated, for several).
    #[arg(
        long = "schema",
        visible_alias = "schemas",
        required = true,
        value_delimiter = ','
    )]
    schemas: Vec<String>,
    /// The role to grant to (must exist).
    #[arg(long)]
    role: String,
    /// What the role does: producer, relay, consumer or console.
    #[arg(long = "as")]
    kind: Kind,
    /// Print the statements instead of running them.
    #[arg(long)]
    print: bool,
}

pub async fn run(a: Args) -> Result<(), CliError> {
    // Validate every name before any SQL is built or any connection opened.
    let schemas = a
        .schemas
        .iter()
        .map(|s| SchemaName::new(s))
        .collect::<Result<Vec<_>, _>>()?;
    let role = RoleName::new(&a.role)?;
    if a.print {
        for schema in &schemas {
            print!("{}", roles::grants(a.kind, schema, &role));
        }
        return Ok(());
    }
    let mut conn = connect(a.database_url.required()?, "postbox-grant").await?;
    for schema in &schemas {
        grant(&mut conn, a.kind, schema, &role).await?;
    }
    Ok(())
}

async fn grant(
    conn: &mut sqlx::PgConnection,
    kind: Kind,
    schema: &SchemaName,
    role: &RoleName,
) -> Result<(), CliError> {
    // One transaction: all of a schema's grants or none, and behind a
    // transaction pooler each statement's parse and execute reach the same
    // server session (postbox::sql::statement).
    let mut tx = conn.begin().await?;
    postbox::migrate::ensure_migrated(&mut tx, schema).await?;
    roles::grant(&mut tx, kind, schema, role).await?;
    println!(
        "granted {:?} rights on schema {schema} to {}",
        kind,
        role.as_str()
    );
    if kind == Kind::Relay {
        // `--notify logical` needs a role attribute only a superuser can give.
        let q = postbox::sql::Queries::new(schema);
        let logical: bool = postbox::sql::statement_scalar(&q.publication_exists)
            .bind(schema.as_str())
            .fetch_one(&mut *tx)
            .await?;
        let replication: bool = postbox::sql::statement_scalar(
            "SELECT rolreplication OR rolsuper FROM pg_catalog.pg_roles WHERE rolname = $1",
        )
        .bind(role.as_str())
        .fetch_optional(&mut *tx)
        .await?
        .unwrap_or(false);
        if logical && !replication {
            println!(
                "note: schema {schema} uses `--notify logical`: the relay's role also needs the REPLICATION attribute; as a superuser: ALTER ROLE {} REPLICATION (until then the relay polls)",
                role.as_str()
            );
        }
    }
    tx.commit().await?;
    Ok(())
}
