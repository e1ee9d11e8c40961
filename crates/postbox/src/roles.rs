//! Least-privilege grants for the kinds of postbox users: producers, the
//! relay, consumers, the operator console. Plain SQL in `sql/roles/`, applied by `postbox grant`.

use crate::{MigrateError, RoleName, SchemaName, UnknownChoice};
use sqlx::PgConnection;

/// What a role does with a postbox schema.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// INSERT into the outbox.
    Producer,
    /// Claim/mark/retry/dead-letter and retention.
    Relay,
    /// INSERT/SELECT on the inbox.
    Consumer,
    /// Read status and dead letters; replay and purge them (`postbox console`).
    Console,
}

impl std::str::FromStr for Kind {
    type Err = UnknownChoice;
    fn from_str(s: &str) -> Result<Self, UnknownChoice> {
        match s {
            "producer" => Ok(Kind::Producer),
            "relay" => Ok(Kind::Relay),
            "consumer" => Ok(Kind::Consumer),
            "console" => Ok(Kind::Console),
            other => Err(UnknownChoice {
                what: "role kind",
                value: other.to_owned(),
                choices: "producer, relay, consumer or console",
            }),
        }
    }
}

/// The GRANT statements for `role` acting as `kind` on `schema`.
pub fn grants(kind: Kind, schema: &SchemaName, role: &RoleName) -> String {
    let template = match kind {
        Kind::Producer => include_str!("../sql/roles/producer.sql"),
        Kind::Relay => include_str!("../sql/roles/relay.sql"),
        Kind::Consumer => include_str!("../sql/roles/consumer.sql"),
        Kind::Console => include_str!("../sql/roles/console.sql"),
    };
    crate::sql::render(template, schema).replace("{role}", role.as_str())
}

/// Apply [`grants`] (as a role allowed to grant, e.g. the schema's owner).
pub async fn grant(
    conn: &mut PgConnection,
    kind: Kind,
    schema: &SchemaName,
    role: &RoleName,
) -> Result<(), MigrateError> {
    sqlx::raw_sql(&grants(kind, schema, role))
        .execute(conn)
        .await
        .map_err(|e| MigrateError::in_schema(e, schema))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grants_are_rendered_with_validated_names() {
        let sql = grants(
            Kind::Relay,
            &SchemaName::new("shop").unwrap(),
            &RoleName::new("shop_relay").unwrap(),
        );
        assert!(sql.contains("GRANT SELECT, INSERT, UPDATE, DELETE ON shop.outbox TO shop_relay;"));
        assert!(!sql.contains('{'));
        assert!(RoleName::new("x; drop").is_err());
    }
}
