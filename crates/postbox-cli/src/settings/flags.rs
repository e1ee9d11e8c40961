//! The command line of `postbox relay`, made from the settings' fields: one
//! `--flag` and one `POSTBOX_*` variable per field, its `--help` line and
//! `[default: …]` from the field itself.

use super::fields::{Field, Kind};
use clap::builder::PossibleValuesParser;
use clap::parser::ValueSource;
use clap::{Arg, ArgAction, ArgMatches, Command};
use humantime_serde::re::humantime;
use std::path::PathBuf;

/// What the command line (flags and environment) set.
#[derive(Debug, Clone, Default)]
pub struct SettingsArgs {
    /// `--config`.
    pub config: Option<PathBuf>,
    /// (section, key, value) for each field given as a flag or variable.
    pub set: Vec<(&'static str, String, toml::Value)>,
    /// Warnings for settings given under a former name.
    pub deprecated: Vec<String>,
}

fn id(f: &Field) -> String {
    format!("{}.{}", f.section, f.key)
}

/// The flag of field `f` (`None` for a field of the config file only).
pub(crate) fn arg(f: &Field) -> Option<Arg> {
    let mut a = Arg::new(id(f))
        .long(f.flag.clone())
        .env(f.env.clone())
        .help(f.summary())
        .long_help(f.doc.clone())
        .value_name(f.key.to_uppercase())
        .required(false);
    for alias in &f.alias_flags {
        a = a.visible_alias(*alias);
    }
    if let Some(d) = f.default_text() {
        a = a.default_value(d);
    }
    if !matches!(f.kind, Kind::List | Kind::Map) {
        // Given twice (a wrapper script's flags, then the user's): the last wins.
        a = a.overrides_with(id(f));
    }
    let key = f.key.clone();
    a = match &f.kind {
        Kind::FileOnly => return None,
        Kind::Secret => a.hide_env_values(true),
        Kind::Str => a,
        Kind::Enum(words) => a.value_parser(PossibleValuesParser::new(words.clone())),
        Kind::Duration => a.value_parser(move |s: &str| {
            humantime::parse_duration(s)
                .map(|_| s.to_owned())
                .map_err(|e| format!("{key}: {e} (write it like 500ms, 2s, 5m or 7d)"))
        }),
        Kind::Int => a.value_parser(move |s: &str| {
            s.parse::<i64>()
                .map(|_| s.to_owned())
                .map_err(|_| format!("{key}: {s:?} is not a whole number"))
        }),
        Kind::Float => a.value_parser(move |s: &str| {
            s.parse::<f64>()
                .map(|_| s.to_owned())
                .map_err(|_| format!("{key}: {s:?} is not a number"))
        }),
        Kind::Bool => a.value_parser(move |s: &str| {
            s.parse::<bool>()
                .map(|_| s.to_owned())
                .map_err(|_| format!("{key}: {s:?} is not true or false"))
        }),
        Kind::List => a.value_delimiter(',').action(ArgAction::Append),
        Kind::Map => a
            .value_delimiter(',')
            .action(ArgAction::Append)
            .value_name("KEY=VALUE")
            .value_parser(move |s: &str| match s.split_once('=') {
                Some((k, _)) if !k.is_empty() => Ok(s.to_owned()),
                _ => Err(format!("{key}: {s:?} is not KEY=VALUE")),
            }),
    };
    Some(a)
}

/// The TOML value of what the command line gave for `f`.
fn value(f: &Field, raw: Vec<String>) -> toml::Value {
    use toml::Value as V;
    let one = || raw.last().cloned().unwrap_or_default();
    match f.kind {
        Kind::Int => V::Integer(one().parse().expect("checked by the parser")),
        Kind::Float => V::Float(one().parse().expect("checked by the parser")),
        Kind::Bool => V::Boolean(one().parse().expect("checked by the parser")),
        Kind::List => V::Array(
            raw.into_iter()
                .filter(|s| !s.is_empty())
                .map(V::String)
                .collect(),
        ),
        Kind::Map => V::Table(
            raw.iter()
                .filter_map(|kv| kv.split_once('='))
                .map(|(k, v)| (k.to_owned(), V::String(v.to_owned())))
                .collect(),
        ),
        _ => V::String(one()),
    }
}

impl clap::FromArgMatches for SettingsArgs {
    fn from_arg_matches(m: &ArgMatches) -> Result<Self, clap::Error> {
        let mut out = SettingsArgs {
            config: m.get_one::<PathBuf>("config").cloned(),
            ..Default::default()
        };
        // What the user gave (defaults are the file's business), as a value.
        let given = |f: &Field| {
            let id = id(f);
            matches!(
                m.value_source(&id),
                Some(ValueSource::CommandLine | ValueSource::EnvVariable)
            )
            .then(|| {
                let raw = m
                    .get_many::<String>(&id)
                    .map(|v| v.cloned().collect())
                    .unwrap_or_default();
                value(f, raw)
            })
        };
        for f in super::all_fields() {
            if f.kind == Kind::FileOnly {
                continue;
            }
            // A former name first, so that the current one wins when both are given.
            for old in &f.renamed_from {
                if let Some(v) = given(&f.former(old)) {
                    out.deprecated.push(f.renamed_note(old));
                    out.set.push((f.section, f.key.clone(), v));
                }
            }
            if let Some(v) = given(&f) {
                out.set.push((f.section, f.key, v));
            }
        }
        Ok(out)
    }

    fn update_from_arg_matches(&mut self, m: &ArgMatches) -> Result<(), clap::Error> {
        *self = Self::from_arg_matches(m)?;
        Ok(())
    }
}

impl clap::Args for SettingsArgs {
    fn augment_args(cmd: Command) -> Command {
        let cmd = cmd.arg(
            Arg::new("config")
                .long("config")
                .short('c')
                .env("POSTBOX_CONFIG")
                .value_name("FILE")
                .value_parser(clap::value_parser!(PathBuf))
                .help("TOML settings file: top-level keys, [relay] and one table per sink (see --print-config --defaults)"),
        );
        let mut cmd = cmd;
        for (heading, fields) in super::fields_by_section() {
            for f in &fields {
                if let Some(a) = arg(f) {
                    cmd = cmd.arg(a.help_heading(heading.clone()));
                }
                for old in &f.renamed_from {
                    if let Some(a) = arg(&f.former(old)) {
                        cmd = cmd.arg(a.hide(true));
                    }
                }
            }
        }
        cmd
    }

    fn augment_args_for_update(cmd: Command) -> Command {
        Self::augment_args(cmd)
    }
}
