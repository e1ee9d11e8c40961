//! `postbox migrate`.

use crate::CliError;
use postbox::migrate::{self, WakeUp};
use postbox::SchemaName;

#[derive(clap::Args)]
pub struct Args {
    /// PostgreSQL URL.
    #[arg(long, env = "POSTBOX_DATABASE_URL", hide_env_values = true)]
    database_url: Option<String>,
    /// Schema to create or upgrade (repeat, or comma-separated, for several). Validated against `^[a-z_][a-z0-9_]{0,62}$`.
    #[arg(
        long = "schema",
        visible_alias = "schemas",
        required = true,
        value_delimiter = ','
    )]
    schemas: Vec<String>,
    /// Relay wake-up: `statement` (a NOTIFY per producer statement), `adaptive` (a NOTIFY
    /// only while the relay worker of the row's partition sleeps), `logical` (no trigger: a
    /// publication of the outbox's inserts the relay follows by logical decoding; needs
    /// wal_level = logical and a relay role with REPLICATION) or `off` (polling only).
    #[arg(long, default_value = "adaptive")]
    notify: WakeUp,
    /// Print the SQL instead of applying it (for your own migration tool).
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
    if a.print {
        for s in &schemas {
            println!("CREATE SCHEMA IF NOT EXISTS {s};");
            for m in migrate::migrations(s) {
                println!(
                    "-- {} (version {}, checksum {})\n{}",
                    m.name, m.version, m.checksum, m.sql
                );
            }
        }
        return Ok(());
    }
    let url = a
        .database_url
        .ok_or("no database: pass --database-url or set POSTBOX_DATABASE_URL (or DATABASE_URL)")?;
    let mut conn = crate::dlq::connect(Some(&url), "postbox-migrate").await?;
    for s in &schemas {
        let r = migrate::run(&mut conn, s, a.notify).await?;
        if r.applied.is_empty() {
            println!("schema {s}: up to date (migrations {:?})", r.already);
        } else {
            println!("schema {s}: applied migrations {:?}", r.applied);
        }
    }
    Ok(())
}
