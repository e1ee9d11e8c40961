//! The settings as text: every key with its doc, default, flag and variable
//! (`--print-config --defaults`, and the docs' reference page), or the
//! effective values with passwords hidden (`--print-config`).

use super::fields::{Field, Kind};
use super::Settings;
use std::fmt::Write;

/// Every setting of every section, as a commented TOML file of defaults.
pub fn reference() -> String {
    let mut out = String::from(
        "# postbox relay settings: every key with its default, its flag and its\n\
         # environment variable. Precedence: defaults < this file < environment < flags.\n",
    );
    for (heading, fields) in super::fields_by_section() {
        let section = fields.first().map(|f| f.section).unwrap_or("");
        let _ = writeln!(out, "\n# ---- {heading}");
        if !section.is_empty() {
            let _ = writeln!(out, "[{section}]");
        }
        for f in &fields {
            entry(&mut out, f);
        }
    }
    out
}

fn entry(out: &mut String, f: &Field) {
    out.push('\n');
    for line in f.doc.lines() {
        let _ = writeln!(out, "# {line}").map(|_| ());
    }
    let mut names = vec![format!("--{}", f.flag)];
    names.extend(f.alias_flags.iter().map(|a| format!("--{a}")));
    names.push(f.env.clone());
    names.extend(f.alias_env.iter().map(|e| e.to_string()));
    if f.kind == Kind::FileOnly {
        let _ = writeln!(out, "# (config file only)");
    } else {
        let _ = writeln!(out, "# {}", names.join(", "));
    }
    match &f.default {
        Some(v) if f.default_text().is_some() => {
            let _ = writeln!(out, "{} = {}", f.key, v);
        }
        _ => {
            let _ = writeln!(out, "# {} = (not set by default)", f.key);
        }
    }
}

/// The effective settings as TOML, passwords replaced by `***`: the sinks in
/// use with their defaults filled in.
pub fn effective(s: &Settings) -> Result<String, crate::CliError> {
    let mut root = toml::Table::new();
    if let Ok(toml::Value::Table(top)) = toml::Value::try_from(&s.top) {
        root.extend(top);
    }
    let mut relay =
        toml::Value::try_from(&s.relay).unwrap_or(toml::Value::Table(Default::default()));
    redact(&mut relay, &super::fields::of::<postbox_relay::Config>());
    root.insert("relay".into(), relay);
    for sink in super::SINKS {
        let in_use = s.top.sink == sink.name || s.top.routes.iter().any(|r| r.sink == sink.name);
        if in_use {
            let table = s.sinks.get(sink.name).cloned();
            let mut t = (sink.effective)(table.unwrap_or(toml::Value::Table(Default::default())))?;
            redact(&mut t, &(sink.fields)());
            root.insert(sink.name.into(), t);
        }
    }
    Ok(toml::to_string(&root)?)
}

fn redact(table: &mut toml::Value, fields: &[Field]) {
    let Some(t) = table.as_table_mut() else {
        return;
    };
    for f in fields {
        match (&f.kind, t.get_mut(&f.key)) {
            (Kind::Secret, Some(toml::Value::String(url))) => {
                *url = postbox_relay::Secret::new(url.clone()).redacted();
            }
            // Client properties may hold passwords and keys: show names only.
            (Kind::Map, Some(toml::Value::Table(map))) => {
                for (k, v) in map.iter_mut() {
                    let k = k.to_ascii_lowercase();
                    if ["pass", "secret", "key", "token", "credential"]
                        .iter()
                        .any(|w| k.contains(w))
                    {
                        *v = toml::Value::String("***".into());
                    }
                }
            }
            _ => {}
        }
    }
}
