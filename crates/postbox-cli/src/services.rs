//! Where PostgreSQL and Redis are, for the command that starts both sides
//! itself (`demo`; `postbox-bench` has the same flags): the flags, env and defaults.

#[derive(clap::Args, Clone)]
pub struct Services {
    /// PostgreSQL URL.
    #[arg(
        long,
        env = "POSTBOX_DATABASE_URL",
        hide_env_values = true,
        default_value = "postgres://postgres:postgres@127.0.0.1:5432/postgres"
    )]
    pub database_url: String,
    /// Redis URL.
    #[arg(
        long,
        env = "POSTBOX_REDIS_URL",
        hide_env_values = true,
        default_value = "redis://127.0.0.1:6379"
    )]
    pub redis_url: String,
}
