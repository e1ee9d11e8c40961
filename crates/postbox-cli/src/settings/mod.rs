//! The relay's settings, layered: defaults < config file < environment <
//! flags. Every setting is a field of a typed section (the top level here,
//! `[relay]` in `postbox-relay`, one table per sink in its crate); flags,
//! environment variables, `--help` and the reference come from those fields.

mod fields;
pub(crate) mod flags;
mod reference;
pub mod sinks;

pub use fields::Field;
pub use flags::SettingsArgs;
pub use reference::{effective, reference, reference_markdown};
pub use sinks::SINKS;

use crate::CliError;
use postbox_relay::{Config, Section};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The top level of the settings file.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct Top {
    /// Sink for events no route matches: one of the sink tables' names
    /// (`bullmq`, `kafka`, `rabbitmq`, `nats`, `redis_streams`, `webhook`,
    /// `sqs`, `sns`).
    pub sink: String,
    /// Serve `/metrics`, `/healthz` and `/readyz` on this address, e.g.
    /// `127.0.0.1:9187`. Not served when unset.
    pub admin_listen: Option<String>,
    /// `[[routes]]`: events matching `topic` (pattern, `*` wildcard) and/or
    /// `schema` go to `sink`; the first match wins.
    pub routes: Vec<Route>,
}

impl Default for Top {
    fn default() -> Self {
        Top {
            sink: "bullmq".into(),
            admin_listen: None,
            routes: Vec::new(),
        }
    }
}

impl Section for Top {
    const NAME: &'static str = "";
}

/// One routing rule: events matching `topic` and/or `schema` go to `sink`.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Route {
    /// Topic pattern, `*` matches any run of characters. Default: any topic.
    pub topic: Option<String>,
    /// Outbox schema. Default: any schema.
    pub schema: Option<String>,
    /// Where matching events go (a sink table's name).
    pub sink: String,
}

/// The loaded settings: typed where the relay reads them, the sinks' tables
/// kept until the sinks in use are built.
#[derive(Debug)]
pub struct Settings {
    pub top: Top,
    pub relay: Config,
    /// Each sink's table (defaults filled in by its own type when built).
    pub sinks: BTreeMap<String, toml::Value>,
    /// The config file they came from, if any (for error messages).
    pub file: Option<std::path::PathBuf>,
    /// Warnings for settings given under a former name, to log once logging is up.
    pub deprecated: Vec<String>,
    /// Whether `relay.schemas` was given (flag, variable or file), rather
    /// than left at its default.
    pub schemas_given: bool,
}

/// A section that does not deserialise: flags and variables are checked as
/// they are parsed, so name the file first.
pub fn invalid(file: Option<&std::path::Path>, table: &str, e: &dyn std::fmt::Display) -> String {
    let e = e.to_string().trim().replace('\n', " ");
    match file {
        Some(path) => format!(
            "invalid config file {}: {table} settings: {e}",
            path.display()
        ),
        None => format!("invalid {table} settings: {e}"),
    }
}

/// Every field of every section, top level first.
pub fn fields_by_section() -> Vec<(String, Vec<Field>)> {
    let mut out = vec![
        ("Settings".to_owned(), fields::of::<Top>()),
        ("Relay [relay]".to_owned(), fields::of::<Config>()),
    ];
    for s in SINKS {
        out.push((format!("{} sink [{}]", s.title, s.name), (s.fields)()));
    }
    out
}

pub fn all_fields() -> Vec<Field> {
    fields_by_section()
        .into_iter()
        .flat_map(|(_, f)| f)
        .collect()
}

impl Settings {
    /// Read the file (if any) and lay the command line and environment over it.
    pub fn load(args: &SettingsArgs) -> Result<Settings, CliError> {
        let mut tree = match &args.config {
            Some(path) => {
                let text = std::fs::read_to_string(path)
                    .map_err(|e| format!("cannot read config file {}: {e}", path.display()))?;
                toml::from_str::<toml::Table>(&text)
                    .map_err(|e| format!("invalid config file {}: {e}", path.display()))?
            }
            None => toml::Table::new(),
        };
        let known_tables: Vec<&str> = std::iter::once("relay")
            .chain(SINKS.iter().map(|s| s.name))
            .collect();
        let top_keys: Vec<String> = fields::of::<Top>().into_iter().map(|f| f.key).collect();
        for key in tree.keys() {
            if !known_tables.contains(&key.as_str()) && !top_keys.contains(key) {
                return Err(format!(
                    "unknown setting `{key}` in the config file: the top level takes {}, and the tables [{}]",
                    top_keys.join(", "),
                    known_tables.join("], [")
                )
                .into());
            }
        }
        for name in &known_tables {
            if tree.get(*name).is_some_and(|v| !v.is_table()) {
                return Err(format!("`{name}` in the config file must be a table: write [{name}] and its keys below it").into());
            }
        }
        let mut deprecated = rename_former_keys(&mut tree, args.config.as_deref())?;
        deprecated.extend(args.deprecated.iter().cloned());
        for (section, key, value) in &args.set {
            table(&mut tree, section).insert(key.clone(), value.clone());
        }
        // Conventional variables (DATABASE_URL, REDIS_URL) fill what nothing else set.
        for f in all_fields() {
            let t = table(&mut tree, f.section);
            if t.contains_key(&f.key) {
                continue;
            }
            if let Some(v) = f.alias_env.iter().find_map(|e| std::env::var(e).ok()) {
                t.insert(f.key.clone(), toml::Value::String(v));
            }
        }
        let relay_table = tree
            .remove("relay")
            .unwrap_or(toml::Value::Table(Default::default()));
        let schemas_given = relay_table.get("schemas").is_some();
        let invalid = |table: &str, e: toml::de::Error| -> CliError {
            invalid(args.config.as_deref(), table, &e).into()
        };
        let relay: Config = relay_table.try_into().map_err(|e| invalid("[relay]", e))?;
        let mut sinks = BTreeMap::new();
        for s in SINKS {
            if let Some(t) = tree.remove(s.name) {
                sinks.insert(s.name.to_owned(), t);
            }
        }
        let top: Top = toml::Value::Table(tree)
            .try_into()
            .map_err(|e| invalid("top-level", e))?;
        Ok(Settings {
            schemas_given,
            top,
            relay,
            sinks,
            file: args.config.clone(),
            deprecated,
        })
    }
}

/// Settings the file gives under a former name, moved to their current one;
/// a warning for each. Both names at once is an error: which one was meant?
fn rename_former_keys(
    tree: &mut toml::Table,
    file: Option<&std::path::Path>,
) -> Result<Vec<String>, CliError> {
    let mut notes = Vec::new();
    for f in all_fields() {
        for old in &f.renamed_from {
            let t = match f.section {
                "" => &mut *tree,
                s => match tree.get_mut(s).and_then(toml::Value::as_table_mut) {
                    Some(t) => t,
                    None => continue,
                },
            };
            let Some(v) = t.remove(*old) else { continue };
            if t.contains_key(&f.key) {
                let path = file.map(|p| p.display().to_string()).unwrap_or_default();
                return Err(format!(
                    "config file {path} sets both {old} and {} in [{}]: {old} is its former name; keep only {}",
                    f.key, f.section, f.key
                )
                .into());
            }
            t.insert(f.key.clone(), v);
            notes.push(f.renamed_note(old));
        }
    }
    Ok(notes)
}

/// The table of `section` (`""`: the top level), created if missing.
fn table<'a>(tree: &'a mut toml::Table, section: &str) -> &'a mut toml::Table {
    if section.is_empty() {
        return tree;
    }
    tree.entry(section.to_owned())
        .or_insert_with(|| toml::Value::Table(Default::default()))
        .as_table_mut()
        .expect("sections are tables (checked when the file is read)")
}
