//! `postbox migrate`.

use crate::connection::{connect, DatabaseUrl, Flag};
use crate::CliError;
use postbox::migrate::{self, WakeUp};
use postbox::SchemaName;

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    database_url: Flag<DatabaseUrl>,
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
    /// Without it, the policy in force is kept (`adaptive` for a new schema).
    #[arg(long)]
    notify: Option<WakeUp>,
    /// Print the SQL instead of applying it, for your own migration tool: exactly what
    /// `migrate` would run on a new schema (or, with --since, on one at that version),
    /// including its rows in postbox_migrations. Run it in one transaction.
    #[arg(long)]
    print: bool,
    /// With --print: only the migrations after this version, for a schema made from an
    /// earlier build's script (`postbox status` and the postbox_migrations table show its
    /// version). The wake-up policy is then left as it is unless --notify is given.
    #[arg(long, default_value_t = 0, requires = "print")]
    since: i32,
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
            print!("{}", migrate::script(s, a.notify, a.since));
        }
        return Ok(());
    }
    let mut conn = connect(a.database_url.required()?, "postbox-migrate").await?;
    for s in &schemas {
        let r = match a.notify {
            Some(notify) => migrate::run(&mut conn, s, notify).await?,
            None => migrate::upgrade(&mut conn, s).await?,
        };
        if r.applied.is_empty() {
            println!(
                "schema {s}: up to date (migrations {:?}), wake-up {}",
                r.already, r.wake_up
            );
        } else {
            println!(
                "schema {s}: applied migrations {:?}, wake-up {}",
                r.applied, r.wake_up
            );
        }
    }
    Ok(())
}
