//! Validated SQL identifiers: the only way a name gets into postbox's SQL.

use crate::error::InvalidIdentifier;
use std::fmt;

/// A schema name checked against `^[a-z_][a-z0-9_]{0,62}$`.
///
/// Schema names are spliced into SQL text (PostgreSQL cannot bind them as
/// parameters), so this check is what keeps that safe: anything that is not a
/// plain lower-case identifier is refused before any SQL is built.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct SchemaName(String);

impl SchemaName {
    /// Validate `name`.
    pub fn new(name: &str) -> Result<Self, InvalidIdentifier> {
        validate("schema name", name)?;
        Ok(SchemaName(name.to_owned()))
    }

    /// The name as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// A role name checked like a schema name (it is spliced into GRANT statements).
#[derive(Clone, PartialEq, Eq, Hash, Debug)]
pub struct RoleName(String);

impl RoleName {
    /// Validate `name`.
    pub fn new(name: &str) -> Result<Self, InvalidIdentifier> {
        validate("role name", name)?;
        Ok(RoleName(name.to_owned()))
    }

    /// The name as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for SchemaName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for SchemaName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.0)
    }
}

impl std::str::FromStr for SchemaName {
    type Err = InvalidIdentifier;
    fn from_str(s: &str) -> Result<Self, InvalidIdentifier> {
        SchemaName::new(s)
    }
}

const RESERVED: &[&str] = &["pg_catalog", "information_schema", "pg_toast", "public"];

fn validate(what: &'static str, value: &str) -> Result<(), InvalidIdentifier> {
    let err = |reason| {
        Err(InvalidIdentifier {
            what,
            value: value.to_owned(),
            reason,
        })
    };
    if value.is_empty() {
        return err("it is empty");
    }
    if value.len() > 63 {
        return err("it is longer than 63 characters (PostgreSQL would truncate it)");
    }
    let mut chars = value.chars();
    let first = chars.next().unwrap();
    if !(first.is_ascii_lowercase() || first == '_') {
        return err("it must start with a lower-case letter or _");
    }
    if !value
        .chars()
        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
    {
        return err(
            "it may contain only a-z, 0-9 and _ (no upper case, quotes, spaces or punctuation)",
        );
    }
    if value.starts_with("pg_") || RESERVED.contains(&value) {
        return err("it is a PostgreSQL system schema or reserved; pick a schema of your own");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_plain_names() {
        for ok in ["consumers", "workers", "_x", "a1_b2", &"a".repeat(63)] {
            assert!(SchemaName::new(ok).is_ok(), "{ok}");
        }
    }

    #[test]
    fn refuses_injection_case_and_length() {
        for bad in [
            "x\"; drop table y;--",
            "Consumers",
            &"a".repeat(70),
            "",
            "1abc",
            "a b",
            "a-b",
            "sch\u{e9}ma",
            "pg_catalog",
            "public",
        ] {
            let e = SchemaName::new(bad).unwrap_err().to_string();
            assert!(e.contains("invalid schema name"), "{bad}: {e}");
        }
    }

    #[test]
    fn error_says_what_to_do() {
        let e = SchemaName::new("Consumers").unwrap_err().to_string();
        assert!(e.contains("a-z, 0-9 and _"), "{e}");
    }
}
