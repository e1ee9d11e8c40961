//! `postbox relay`.

use crate::settings::{self, Settings, SettingsArgs};
use crate::CliError;
use postbox_relay::{Destination, Relay, RouteMatch, Router, TopicPattern};
use std::collections::HashMap;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

#[derive(clap::Args)]
#[command(
    after_help = "Settings are layered: built-in defaults < config file < environment < flags.\n\
                  `--print-config --defaults` prints every setting with its default, flag and variable.\n\
                  Passwords in URLs are never printed."
)]
pub struct Args {
    #[command(flatten)]
    settings: SettingsArgs,
    /// Print the effective settings as TOML (passwords hidden) and exit. Prints what it
    /// parsed; `--check` also applies the rules between settings and connects.
    #[arg(long)]
    print_config: bool,
    /// Check the configuration and exit: parse it, apply the rules between settings,
    /// connect to PostgreSQL (every schema migrated) and to each broker, print each
    /// result with its cause; non-zero exit status on any failure.
    #[arg(long, conflicts_with = "print_config")]
    check: bool,
    /// With --print-config: every setting's default, doc, flag and variable instead.
    #[arg(long, requires = "print_config")]
    defaults: bool,
    /// With --print-config --defaults: as the docs book's Markdown page.
    #[arg(long, requires = "defaults")]
    markdown: bool,
}

pub async fn run(a: Args, shutdown: CancellationToken) -> Result<(), CliError> {
    if a.print_config && a.markdown {
        print!("{}", settings::reference_markdown());
        return Ok(());
    }
    if a.print_config && a.defaults {
        print!("{}", settings::reference());
        return Ok(());
    }
    let s = Settings::load(&a.settings)?;
    for note in &s.deprecated {
        tracing::warn!("{note}");
    }
    if a.print_config {
        print!("{}", settings::effective(&s)?);
        return Ok(());
    }
    if a.check {
        return check(s).await;
    }
    let (sink, target) = build_destination(&s)?;
    tracing::info!(version = crate::VERSION, database = %s.relay.database_url, sink = sink.name(), "starting relay");
    let relay = Relay::new(s.relay, sink)?.target(target);
    let admin = match &s.top.admin_listen {
        Some(addr) => Some(crate::admin::serve(addr, relay.readiness(), shutdown.clone()).await?),
        None => None,
    };
    let schemas_given = s.schemas_given;
    relay
        .run(shutdown.clone())
        .await
        .map_err(|e| default_schema_missing(e, schemas_given))?;
    shutdown.cancel();
    if let Some(a) = admin {
        let _ = a.await;
    }
    Ok(())
}

/// A relay given no schema serves the default one: when that has no tables,
/// say so, rather than name a schema the user never wrote.
fn default_schema_missing(e: postbox_relay::RelayError, schemas_given: bool) -> CliError {
    match e {
        postbox_relay::RelayError::Schema(postbox::MigrateError::SchemaNotMigrated { schema })
            if !schemas_given =>
        {
            format!(
                "no schema given (--schemas, POSTBOX_SCHEMAS or `schemas` under [relay]), so the relay serves the default schema {schema:?}, which has no postbox tables: name the schemas your services migrated (`postbox relay --schemas orders,billing`), or run `postbox migrate --schema {schema}`"
            )
            .into()
        }
        other => other.into(),
    }
}

/// `--check`: what the relay would check before and as it starts, each
/// reported, without relaying anything.
async fn check(s: Settings) -> Result<(), CliError> {
    let (sink, target) = build_destination(&s)?;
    let database = s.relay.database_url.redacted();
    let schemas = s.relay.schemas.join(", ");
    let timeout = s
        .relay
        .publish_timeout
        .min(std::time::Duration::from_secs(5));
    let relay = Relay::new(s.relay, sink.clone())?;
    println!("ok    settings");
    for note in &s.deprecated {
        println!("warn  {note}");
    }
    let mut failed = 0;
    match relay.preflight().await {
        Ok(()) => println!("ok    PostgreSQL at {database}: schemas {schemas} migrated"),
        Err(e) => {
            failed += 1;
            println!(
                "FAIL  PostgreSQL: {}",
                default_schema_missing(e, s.schemas_given)
            );
        }
    }
    match tokio::time::timeout(timeout, sink.check()).await {
        Ok(Ok(())) => println!("ok    {} reachable: {target}", sink.name()),
        Ok(Err(e)) => {
            failed += 1;
            println!("FAIL  {}: {e} ({target})", sink.name());
        }
        Err(_) => {
            failed += 1;
            println!(
                "FAIL  {}: no answer within {} ({target})",
                sink.name(),
                postbox::display_duration(timeout)
            );
        }
    }
    match failed {
        0 => Ok(()),
        n => Err(format!("{n} check(s) failed").into()),
    }
}

/// One sink per kind in use; a router in front when routes are configured.
/// Also where they publish, for the log (no secrets).
fn build_destination(s: &Settings) -> Result<(Arc<dyn Destination>, String), CliError> {
    let mut built: HashMap<&str, Arc<dyn Destination>> = HashMap::new();
    let mut targets = Vec::new();
    let used =
        std::iter::once(s.top.sink.as_str()).chain(s.top.routes.iter().map(|r| r.sink.as_str()));
    for name in used {
        if built.contains_key(name) {
            continue;
        }
        let kind = settings::sinks::find(name)?;
        let table = s
            .sinks
            .get(name)
            .cloned()
            .unwrap_or(toml::Value::Table(Default::default()));
        let b = (kind.build)(table, &s.relay, s.file.as_deref())?;
        tracing::info!(sink = name, "{}", b.describe);
        targets.push(b.describe);
        built.insert(kind.name, b.destination);
    }
    let target = targets.join("; ");
    let default = built[s.top.sink.as_str()].clone();
    if s.top.routes.is_empty() {
        return Ok((default, target));
    }
    let mut router = Router::new(default);
    for r in &s.top.routes {
        if r.topic.as_deref() == Some("") || (r.topic.is_none() && r.schema.is_none()) {
            return Err(
                "invalid route: give a non-empty `topic` pattern, a `schema`, or both".into(),
            );
        }
        let m = RouteMatch {
            topic: r.topic.clone().map(TopicPattern::new),
            schema: r.schema.clone(),
        };
        router = router.route(m, built[r.sink.as_str()].clone());
    }
    Ok((Arc::new(router), target))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cmd {
        #[command(flatten)]
        settings: SettingsArgs,
    }

    fn given(args: &[&str]) -> bool {
        let cmd =
            Cmd::try_parse_from(std::iter::once("relay").chain(args.iter().copied())).unwrap();
        Settings::load(&cmd.settings).unwrap().schemas_given
    }

    #[test]
    fn a_relay_given_no_schema_says_so_when_the_default_has_no_tables() {
        assert!(!given(&[]));
        assert!(given(&["--schemas", "orders"]));
        let missing = || {
            postbox_relay::RelayError::Schema(postbox::MigrateError::SchemaNotMigrated {
                schema: "postbox".into(),
            })
        };
        let e = default_schema_missing(missing(), false).to_string();
        assert!(
            e.starts_with("no schema given (--schemas")
                && e.contains("the default schema \"postbox\"")
                && e.contains("postbox relay --schemas"),
            "{e}"
        );
        // Named by the user: the plain error, which names their schema.
        let e = default_schema_missing(missing(), true).to_string();
        assert!(
            e.starts_with("schema \"postbox\" has no postbox tables"),
            "{e}"
        );
    }
}
