//! Where PostgreSQL and Redis are, for the command that starts both sides
//! itself (`demo`): the relay's own settings fields, with the local servers
//! as defaults.

use crate::connection::{Flag, LocalDatabaseUrl, RedisUrl};

#[derive(clap::Args)]
pub struct Services {
    #[command(flatten)]
    database_url: Flag<LocalDatabaseUrl>,
    #[command(flatten)]
    redis_url: Flag<RedisUrl>,
}

impl Services {
    /// The PostgreSQL URL.
    pub fn database_url(&self) -> &str {
        self.database_url.get().expect("a default")
    }

    /// The Redis URL.
    pub fn redis_url(&self) -> &str {
        self.redis_url.get().expect("a default")
    }
}
