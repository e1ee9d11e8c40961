//! `postbox dlq` (the events the relay gave up on) and `postbox inbox-dlq`
//! (the messages a consumer's handler gave up on): list, show, replay and
//! purge them. Both are thin fronts over the console's
//! `ops::dead_letters`, which selects, acts and writes the audit row for
//! every face (the console's pages and API too): a replay or purge from here
//! is recorded with the OS user and the database role that made it.
//!
//! Safe on a live system: a relay-side replay moves rows back into the outbox
//! in one statement (a running relay is woken by the outbox's NOTIFY
//! trigger); a consumer-side replay marks the rows, and a running consumer of
//! that name takes each one and runs its handler in the transaction that
//! records the message in the inbox; a purge is one DELETE. Nothing changes
//! without `--yes`.

use crate::target::{DeadLetterId, SchemaArgs};
use crate::CliError;
use postbox::sql::{statement_scalar, Queries};
use postbox::SchemaName;
use postbox_console::ops::dead_letters::{self, Act, Action, Filter, Side};
use postbox_console::ops::OpsError;
use sqlx::{Connection, PgConnection};

mod filter;
mod show;

use filter::{ActArgs, ConsumerArg, FilterArgs};

/// How many rows a dry run or a replay/purge report prints.
const SHOWN: i64 = 100;

#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    command: RelayCommand,
}

#[derive(clap::Subcommand)]
enum RelayCommand {
    /// List dead letters (oldest first) as a table, or JSON with --json.
    List {
        #[command(flatten)]
        target: SchemaArgs,
        #[command(flatten)]
        filter: FilterArgs,
        #[command(flatten)]
        list: ListArgs,
    },
    /// Print one dead letter in full, as JSON.
    Show {
        #[command(flatten)]
        target: SchemaArgs,
        #[command(flatten)]
        id: DeadLetterId,
    },
    /// Move dead letters back into the outbox, to be relayed again.
    ///
    /// They keep their event_id (so the broker and the consumers' inbox still
    /// de-duplicate them), topic, event, key, payload, headers and created_at,
    /// and start over with attempts = 0. They get new outbox ids in dead-letter
    /// order: replayed events of one key keep their relative order, and are
    /// delivered after the rows of their key already waiting in the outbox.
    /// Without --yes, only prints what it would replay.
    Replay {
        #[command(flatten)]
        target: SchemaArgs,
        #[command(flatten)]
        filter: FilterArgs,
        #[command(flatten)]
        act: ActArgs,
    },
    /// Delete dead letters for good. Without --yes, only prints what it would delete.
    Purge {
        #[command(flatten)]
        target: SchemaArgs,
        #[command(flatten)]
        filter: FilterArgs,
        #[command(flatten)]
        act: ActArgs,
    },
}

#[derive(clap::Args)]
pub struct InboxArgs {
    #[command(subcommand)]
    command: ConsumerCommand,
}

#[derive(clap::Subcommand)]
enum ConsumerCommand {
    /// List consumer dead letters (oldest first) as a table, or JSON with --json.
    List {
        #[command(flatten)]
        target: SchemaArgs,
        #[command(flatten)]
        consumer: ConsumerArg,
        #[command(flatten)]
        filter: FilterArgs,
        #[command(flatten)]
        list: ListArgs,
    },
    /// Print one consumer dead letter in full, as JSON (the payload as JSON
    /// when it is, else as text).
    Show {
        #[command(flatten)]
        target: SchemaArgs,
        #[command(flatten)]
        id: DeadLetterId,
    },
    /// Ask the running consumers to run these messages again, through the
    /// inbox (applied at most once). A consumer picks them up within its
    /// replay poll (2 s by default); without --yes, only prints what it would
    /// replay.
    Replay {
        #[command(flatten)]
        target: SchemaArgs,
        #[command(flatten)]
        consumer: ConsumerArg,
        #[command(flatten)]
        filter: FilterArgs,
        #[command(flatten)]
        act: ActArgs,
    },
    /// Delete consumer dead letters for good. Without --yes, only prints what
    /// it would delete.
    Purge {
        #[command(flatten)]
        target: SchemaArgs,
        #[command(flatten)]
        consumer: ConsumerArg,
        #[command(flatten)]
        filter: FilterArgs,
        #[command(flatten)]
        act: ActArgs,
    },
}

#[derive(clap::Args)]
struct ListArgs {
    /// Print one JSON array instead of a table.
    #[arg(long)]
    json: bool,
    /// Show at most this many rows (0 = all).
    #[arg(long, default_value_t = 100)]
    limit: i64,
}

/// What either command was asked to do.
enum Request {
    List(ListArgs),
    Show(i64),
    Act(Action, ActArgs),
}

pub async fn run(a: Args) -> Result<(), CliError> {
    let (target, filter, request) = match a.command {
        RelayCommand::List {
            target,
            filter,
            list,
        } => (target, filter.filter(None), Request::List(list)),
        RelayCommand::Show { target, id } => (target, Filter::default(), Request::Show(id.get())),
        RelayCommand::Replay {
            target,
            filter,
            act,
        } => (
            target,
            filter.filter(None),
            Request::Act(Action::Replay, act),
        ),
        RelayCommand::Purge {
            target,
            filter,
            act,
        } => (
            target,
            filter.filter(None),
            Request::Act(Action::Purge, act),
        ),
    };
    side_run(Side::Relay, target, filter, request).await
}

pub async fn run_inbox(a: InboxArgs) -> Result<(), CliError> {
    let (target, filter, request) = match a.command {
        ConsumerCommand::List {
            target,
            consumer,
            filter,
            list,
        } => (target, filter.filter(Some(consumer)), Request::List(list)),
        ConsumerCommand::Show { target, id } => {
            (target, Filter::default(), Request::Show(id.get()))
        }
        ConsumerCommand::Replay {
            target,
            consumer,
            filter,
            act,
        } => (
            target,
            filter.filter(Some(consumer)),
            Request::Act(Action::Replay, act),
        ),
        ConsumerCommand::Purge {
            target,
            consumer,
            filter,
            act,
        } => (
            target,
            filter.filter(Some(consumer)),
            Request::Act(Action::Purge, act),
        ),
    };
    side_run(Side::Consumer, target, filter, request).await
}

/// The command of either side: the filter is checked before connecting.
async fn side_run(
    side: Side,
    target: SchemaArgs,
    filter: Filter,
    request: Request,
) -> Result<(), CliError> {
    filter.check(side)?;
    let app = show::command(side);
    match request {
        Request::List(l) => {
            if l.limit < 0 {
                return Err("--limit must be 0 (all) or more".into());
            }
            let (schema, mut conn) = target.open(app).await?;
            let limit = if l.limit == 0 { i64::MAX } else { l.limit };
            let q = Queries::new(&schema);
            let page = dead_letters::list(&mut conn, &q, side, &filter, limit, None).await?;
            show::list(side, &schema, &page, l.json)
        }
        Request::Show(id) => {
            let (schema, mut conn) = target.open(app).await?;
            let q = Queries::new(&schema);
            let d = dead_letters::get(&mut conn, &q, side, id).await?.ok_or_else(|| {
                format!(
                    "no {} with id {id} in schema {schema}; `{app} list --schema {schema}` lists them",
                    show::kind(side)
                )
            })?;
            println!("{}", serde_json::to_string_pretty(&show::json(&d))?);
            Ok(())
        }
        Request::Act(action, a) => act(side, target, filter, action, a).await,
    }
}

/// A replay or purge: a dry run without `--yes`.
async fn act(
    side: Side,
    target: SchemaArgs,
    filter: Filter,
    action: Action,
    a: ActArgs,
) -> Result<(), CliError> {
    filter.check_act(side, action, a.all)?;
    let (schema, mut conn) = target.open(show::command(side)).await?;
    let q = Queries::new(&schema);
    if !a.yes {
        return dry_run(&mut conn, &q, &schema, side, &filter, action).await;
    }
    let actor = actor(&mut conn, &q).await?;
    let asked = Act {
        side,
        action,
        filter: &filter,
        all: a.all,
        confirmed: None,
    };
    match dead_letters::act(&mut conn, &q, &asked, &actor).await {
        Ok(touched) => {
            show::touched(side, action, &schema, &touched, SHOWN);
            Ok(())
        }
        Err(OpsError::NothingMatches { .. }) => {
            let kind = show::kind(side);
            println!(
                "no {kind}s in schema {schema} match; nothing to {}",
                action.as_str()
            );
            Ok(())
        }
        Err(e) => Err(e.into()),
    }
}

/// What `--yes` would do, and (for a relay-side replay) what it would refuse.
async fn dry_run(
    conn: &mut PgConnection,
    q: &Queries,
    schema: &SchemaName,
    side: Side,
    filter: &Filter,
    action: Action,
) -> Result<(), CliError> {
    let page = dead_letters::list(conn, q, side, filter, SHOWN, None).await?;
    show::dry_run(side, action, schema, &page);
    if (side, action) == (Side::Relay, Action::Replay) && page.matching > 0 {
        dead_letters::refuse_clashes(conn, q, filter, page.matching).await?;
    }
    Ok(())
}

/// Who acts, for the audit table: the OS user and the database role.
async fn actor(conn: &mut PgConnection, q: &Queries) -> Result<String, CliError> {
    let mut tx = conn.begin().await?;
    let role: String = statement_scalar(&q.session_role)
        .fetch_one(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(format!(
        "{} (postbox cli, database role {role})",
        whoami::username()
    ))
}
