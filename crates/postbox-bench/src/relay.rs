//! The relay settings `postbox-bench` takes on its command line. They are
//! fields of the relay's own [`Config`], not copies: each flag is named after
//! its field (`--batch-size` for `batch_size`), its help is the field's doc,
//! its value goes through the field's type, and the whole is checked by
//! [`Config::validate`], as `postbox relay` checks it. The defaults are
//! [`defaults`]: the relay's, but for the batch size.

use clap::parser::ValueSource;
use clap::{Arg, ArgMatches, Command};
use humantime_serde::re::humantime;
use postbox_relay::Config;
use serde::ser::{SerializeMap, Serializer};
use serde_json::Value;
use std::ops::Deref;

/// The fields of [`Config`] the bench takes as flags.
const FIELDS: &[&str] = &[
    "workers",
    "batch_size",
    "busy_poll_interval",
    "consolidate_after",
    "keeping_up_workers",
];

/// The bench's relay before its flags: the relay's defaults, with batches of
/// 1,000 rows instead of 500, the size the drain tables of
/// docs/src/benchmarks.md were measured at, so that a run with the defaults
/// compares with them.
pub fn defaults() -> Config {
    Config {
        batch_size: 1000,
        ..Config::default()
    }
}

/// What the command line gave for [`FIELDS`]: (field, value as the
/// relay's settings file would hold it).
#[derive(Debug, Clone, Default)]
pub struct RelayArgs {
    given: Vec<(&'static str, Value)>,
}

impl RelayArgs {
    /// [`defaults`] with the flags laid over, one field at a time so that an
    /// error names its flag.
    pub fn config(&self) -> Result<BenchRelay, String> {
        let mut tree = serde_json::to_value(defaults()).expect("the relay's settings serialise");
        let mut config = defaults();
        for (field, value) in &self.given {
            tree[*field] = value.clone();
            config = serde_json::from_value(tree.clone())
                .map_err(|e| format!("--{}: {e}", flag(field)))?;
        }
        Ok(BenchRelay(config))
    }
}

/// The relay settings of a run. The JSON report shows [`FIELDS`] (the
/// others are the relay's defaults; `database_url` may carry a password).
#[derive(Debug, Clone)]
pub struct BenchRelay(Config);

impl BenchRelay {
    /// Refuse what the relay would refuse, naming the flag.
    pub fn validate(&self, database_url: &str) -> Result<(), String> {
        let check = Config {
            database_url: postbox_relay::Secret::new(database_url),
            ..self.0.clone()
        };
        check
            .validate()
            .map(|_| ())
            .map_err(|e| format!("--{}: {}", flag(e.field), e.reason))
    }
}

impl Deref for BenchRelay {
    type Target = Config;
    fn deref(&self) -> &Config {
        &self.0
    }
}

impl serde::Serialize for BenchRelay {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let all = serde_json::to_value(&self.0).map_err(serde::ser::Error::custom)?;
        let mut map = s.serialize_map(Some(FIELDS.len()))?;
        for field in FIELDS {
            map.serialize_entry(field, &all[*field])?;
        }
        map.end()
    }
}

fn flag(field: &str) -> String {
    field.replace('_', "-")
}

/// The first sentence of a doc comment: the `--help` line.
fn summary(doc: &str) -> String {
    let text = doc.split("\n\n").next().unwrap_or("").replace('\n', " ");
    match text.find(". ") {
        Some(i) => text[..=i].to_owned(),
        None => text,
    }
}

/// A value as the command line writes it (`1000`, `1ms`).
fn plain(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

impl clap::Args for RelayArgs {
    fn augment_args(cmd: Command) -> Command {
        let schema =
            serde_json::to_value(schemars::schema_for!(Config)).expect("schemas serialise");
        let ours = serde_json::to_value(defaults()).expect("the relay's settings serialise");
        let relays =
            serde_json::to_value(Config::default()).expect("the relay's settings serialise");
        let mut cmd = cmd;
        for field in FIELDS {
            let prop = &schema["properties"][*field];
            let doc = prop["description"].as_str().unwrap_or_default();
            let note = if ours[*field] != relays[*field] {
                format!(" The relay's default is {}.", plain(&relays[*field]))
            } else {
                String::new()
            };
            let duration = prop["format"] == "duration";
            let parse = move |s: &str| -> Result<Value, String> {
                if duration {
                    humantime::parse_duration(s)
                        .map(|_| Value::String(s.to_owned()))
                        .map_err(|e| format!("{e} (write it like 500ms, 2s or 5m)"))
                } else {
                    s.parse::<i64>()
                        .map(Value::from)
                        .map_err(|_| format!("{s:?} is not a whole number"))
                }
            };
            cmd = cmd.arg(
                Arg::new(*field)
                    .long(flag(field))
                    .value_name(field.to_uppercase())
                    .help(format!("Relay: {}{note}", summary(doc)))
                    .long_help(format!("Relay: {doc}{note}"))
                    .default_value(plain(&ours[*field]))
                    .value_parser(parse),
            );
        }
        cmd
    }

    fn augment_args_for_update(cmd: Command) -> Command {
        Self::augment_args(cmd)
    }
}

impl clap::FromArgMatches for RelayArgs {
    fn from_arg_matches(m: &ArgMatches) -> Result<Self, clap::Error> {
        let given = FIELDS
            .iter()
            .filter(|f| m.value_source(f) == Some(ValueSource::CommandLine))
            .filter_map(|f| Some((*f, m.get_one::<Value>(f)?.clone())))
            .collect();
        Ok(RelayArgs { given })
    }

    fn update_from_arg_matches(&mut self, m: &ArgMatches) -> Result<(), clap::Error> {
        *self = Self::from_arg_matches(m)?;
        Ok(())
    }
}
