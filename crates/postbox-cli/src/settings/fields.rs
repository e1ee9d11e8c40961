//! What a settings section looks like from outside: its fields, each with its
//! TOML key, kind, default, documentation, flag and environment variables,
//! read off the section's type (its JSON schema and its `Default`).

use postbox_relay::{Alias, Section};
use serde_json::Value as Json;

/// How a field is written on the command line.
#[derive(Debug, Clone, PartialEq)]
pub enum Kind {
    Bool,
    Int,
    Float,
    Str,
    /// A URL that may carry a password: never echoed.
    Secret,
    /// `500ms`, `2s`, `5m`, `7d`.
    Duration,
    /// One of these words.
    Enum(Vec<String>),
    /// Comma-separated (or repeated) strings.
    List,
    /// Comma-separated (or repeated) `KEY=VALUE` pairs.
    Map,
    /// Structured (`[[routes]]`): the config file only.
    FileOnly,
}

/// One setting.
#[derive(Debug, Clone)]
pub struct Field {
    /// The section's TOML table (`""`: top level).
    pub section: &'static str,
    /// The TOML key.
    pub key: String,
    /// The doc comment.
    pub doc: String,
    pub kind: Kind,
    /// The built-in default, as TOML (`None`: unset by default).
    pub default: Option<toml::Value>,
    /// The flag, without `--`.
    pub flag: String,
    /// The environment variable.
    pub env: String,
    /// Further flags and environment variables.
    pub alias_flags: Vec<&'static str>,
    pub alias_env: Vec<&'static str>,
    /// Former keys, read with a warning (each with its flag and variable).
    pub renamed_from: Vec<&'static str>,
    /// The prefixes its flag and variable are made with (`kafka-`, `POSTBOX_KAFKA_`).
    pub flag_prefix: String,
    pub env_prefix: String,
}

impl Field {
    /// The same setting under its former key `old`: its flag and variable.
    pub fn former(&self, old: &'static str) -> Field {
        Field {
            key: old.to_owned(),
            flag: format!("{}{}", self.flag_prefix, old.replace('_', "-")),
            env: format!("{}{}", self.env_prefix, old.to_uppercase()),
            alias_flags: Vec::new(),
            alias_env: Vec::new(),
            renamed_from: Vec::new(),
            default: None,
            ..self.clone()
        }
    }

    /// What to write instead of `old`, for the warning.
    pub fn renamed_note(&self, old: &str) -> String {
        let at = |k: &str| match self.section {
            "" => k.to_owned(),
            s => format!("{s}.{k}"),
        };
        format!(
            "setting {} is deprecated and will be removed: write {} (--{}, {})",
            at(old),
            at(&self.key),
            self.flag,
            self.env
        )
    }

    /// The first sentence of the doc: the `--help` line.
    pub fn summary(&self) -> String {
        let text = self
            .doc
            .split("\n\n")
            .next()
            .unwrap_or("")
            .replace('\n', " ");
        match text.find(". ") {
            Some(i) => text[..=i].to_owned(),
            None => text,
        }
    }

    /// The default as the command line would write it.
    pub fn default_text(&self) -> Option<String> {
        Some(match self.default.as_ref()? {
            toml::Value::String(s) if s.is_empty() => return None,
            toml::Value::String(s) => s.clone(),
            toml::Value::Array(a) if a.is_empty() => return None,
            toml::Value::Array(a) => a.iter().map(plain).collect::<Vec<_>>().join(","),
            toml::Value::Table(t) if t.is_empty() => return None,
            other => plain(other),
        })
    }
}

fn plain(v: &toml::Value) -> String {
    match v {
        toml::Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// The fields of section `S`.
pub fn of<S: Section>() -> Vec<Field> {
    let schema = serde_json::to_value(schemars::schema_for!(S)).expect("schemas serialise");
    let defaults = toml::Value::try_from(S::default()).expect("defaults serialise to TOML");
    let defs = schema.get("$defs").cloned().unwrap_or(Json::Null);
    let (flag_prefix, env_prefix) = match S::NAME {
        "" | "relay" => (String::new(), "POSTBOX_".to_owned()),
        name => (
            format!("{}-", name.replace('_', "-")),
            format!("POSTBOX_{}_", name.to_uppercase()),
        ),
    };
    let section = if S::NAME == "relay" { "relay" } else { S::NAME };
    let mut out = Vec::new();
    let props = schema["properties"]
        .as_object()
        .cloned()
        .unwrap_or_default();
    for (key, prop) in props {
        let prop = resolve(&prop, &defs);
        let alias: Option<&Alias> = S::ALIASES.iter().find(|a| a.field == key);
        out.push(Field {
            section,
            doc: doc_of(&prop),
            kind: kind_of(&prop, &defs),
            default: defaults.get(&key).cloned(),
            flag: format!("{flag_prefix}{}", key.replace('_', "-")),
            env: format!("{env_prefix}{}", key.to_uppercase()),
            alias_flags: alias.map(|a| a.flags.to_vec()).unwrap_or_default(),
            alias_env: alias.map(|a| a.env.to_vec()).unwrap_or_default(),
            renamed_from: S::RENAMED
                .iter()
                .filter(|r| r.new == key)
                .map(|r| r.old)
                .collect(),
            flag_prefix: flag_prefix.clone(),
            env_prefix: env_prefix.clone(),
            key,
        });
    }
    // Alphabetical (the schema's map order): stable for the generated reference.
    out
}

fn resolve(prop: &Json, defs: &Json) -> Json {
    if let Some(r) = prop.get("$ref").and_then(Json::as_str) {
        let name = r.rsplit('/').next().unwrap_or("");
        let mut target = defs.get(name).cloned().unwrap_or(Json::Null);
        // A field's own doc wins over its type's.
        if let (Some(d), Some(obj)) = (prop.get("description"), target.as_object_mut()) {
            obj.insert("description".into(), d.clone());
        }
        return target;
    }
    prop.clone()
}

fn doc_of(prop: &Json) -> String {
    let part = |k: &str| {
        prop.get(k)
            .and_then(Json::as_str)
            .unwrap_or("")
            .trim()
            .to_owned()
    };
    let (title, description) = (part("title"), part("description"));
    match (title.is_empty(), description.is_empty()) {
        (false, false) => format!("{title}\n\n{description}"),
        (false, true) => title,
        _ => description,
    }
}

fn kind_of(prop: &Json, defs: &Json) -> Kind {
    if let Some(values) = enum_values(prop) {
        return Kind::Enum(values);
    }
    let ty = match prop.get("type") {
        Some(Json::String(t)) => t.as_str(),
        // `Option<T>`: ["T", "null"].
        Some(Json::Array(ts)) => ts
            .iter()
            .filter_map(Json::as_str)
            .find(|t| *t != "null")
            .unwrap_or("null"),
        _ => "",
    };
    match (ty, prop.get("format").and_then(Json::as_str)) {
        ("string", Some("duration")) => Kind::Duration,
        ("string", Some("secret-url")) => Kind::Secret,
        ("string", _) => Kind::Str,
        ("boolean", _) => Kind::Bool,
        ("integer", _) => Kind::Int,
        ("number", _) => Kind::Float,
        ("array", _) => {
            let items = resolve(prop.get("items").unwrap_or(&Json::Null), defs);
            if items.get("type").and_then(Json::as_str) == Some("string") {
                Kind::List
            } else {
                Kind::FileOnly
            }
        }
        ("object", _)
            if prop
                .get("additionalProperties")
                .and_then(|p| p.get("type"))
                .and_then(Json::as_str)
                == Some("string") =>
        {
            Kind::Map
        }
        _ => Kind::FileOnly,
    }
}

/// The words of a unit-only enum (`"enum": [...]`, or `oneOf` of `const`s
/// when its variants are documented).
fn enum_values(prop: &Json) -> Option<Vec<String>> {
    if let Some(values) = prop.get("enum").and_then(Json::as_array) {
        return values
            .iter()
            .map(|v| v.as_str().map(str::to_owned))
            .collect();
    }
    let one_of = prop.get("oneOf")?.as_array()?;
    one_of
        .iter()
        .map(|v| {
            v.get("const")
                .and_then(Json::as_str)
                .or_else(|| v.get("enum")?.as_array()?.first()?.as_str())
                .map(str::to_owned)
        })
        .collect()
}
