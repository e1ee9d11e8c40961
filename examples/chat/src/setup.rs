//! `chat setup`: each service gets a login role that owns its schema and has no
//! rights anywhere else, so neither service can read the other's tables.

use crate::Error;
use postbox::SchemaName;
use sqlx::{Connection, PgConnection};

#[derive(clap::Args, Clone)]
pub struct SetupArgs {
    /// Admin PostgreSQL URL (creates roles and schemas).
    #[arg(
        long,
        env = "DATABASE_URL",
        hide_env_values = true,
        default_value = "postgres://postgres:postgres@127.0.0.1:5432/postgres"
    )]
    pub admin_url: String,
    /// Service schemas to set up.
    #[arg(long = "schema", default_values = ["consumers", "workers"])]
    pub schemas: Vec<String>,
    /// Password of the service roles (demo only; use real secrets in production).
    #[arg(long, default_value = "chat", hide_default_value = true)]
    pub role_password: String,
    /// Drop the schemas first (fresh demo).
    #[arg(long)]
    pub reset: bool,
}

/// The login role of a service schema.
pub fn role_for(schema: &SchemaName) -> String {
    format!("chat_{schema}")
}

/// `admin_url` with the service role's credentials instead.
pub fn service_url(admin_url: &str, schema: &SchemaName, password: &str) -> Result<String, Error> {
    let mut url = url::Url::parse(admin_url).map_err(|e| format!("admin URL is not a URL: {e}"))?;
    url.set_username(&role_for(schema))
        .map_err(|_| "admin URL cannot take a user name")?;
    url.set_password(Some(password))
        .map_err(|_| "admin URL cannot take a password")?;
    Ok(url.to_string())
}

pub async fn run(a: SetupArgs) -> Result<(), Error> {
    let schemas = a
        .schemas
        .iter()
        .map(|s| SchemaName::new(s))
        .collect::<Result<Vec<_>, _>>()?;
    let mut admin = PgConnection::connect(&a.admin_url).await.map_err(|e| {
        format!(
            "cannot connect as admin to {}: {e}",
            postbox_relay::Secret::new(a.admin_url.clone())
        )
    })?;
    for schema in &schemas {
        let role = role_for(schema);
        if a.reset {
            sqlx::raw_sql(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE"))
                .execute(&mut admin)
                .await?;
        }
        // Role and schema names are validated identifiers; the password is a literal, quoted.
        let password = a.role_password.replace('\'', "''");
        sqlx::raw_sql(&format!(
            "DO $$ BEGIN
               CREATE ROLE {role} LOGIN PASSWORD '{password}';
             EXCEPTION WHEN duplicate_object THEN
               ALTER ROLE {role} LOGIN PASSWORD '{password}';
             END $$;
             CREATE SCHEMA IF NOT EXISTS {schema} AUTHORIZATION {role};"
        ))
        .execute(&mut admin)
        .await?;
        // Everything else is created by the service role itself, so it owns it.
        let url = service_url(&a.admin_url, schema, &a.role_password)?;
        let mut conn = PgConnection::connect(&url)
            .await
            .map_err(|e| format!("cannot connect as {role}: {e}"))?;
        postbox::migrate::run(&mut conn, schema, Default::default()).await?;
        sqlx::raw_sql(&postbox::sql::render(
            include_str!("../sql/chat_tables.sql"),
            schema,
        ))
        .execute(&mut conn)
        .await?;
        println!("service schema {schema} ready (role {role})");
    }
    Ok(())
}
