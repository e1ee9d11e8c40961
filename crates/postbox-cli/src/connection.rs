//! Where PostgreSQL (and, for the demo, Redis) are, for every command. The
//! flag is the relay's own settings field (`[relay] database_url`,
//! `[bullmq] redis_url`): its name, `--help`, `POSTBOX_*` variable and the
//! conventional variable it falls back on (`DATABASE_URL`, `REDIS_URL`) are
//! defined once, there, whichever command takes it.

use crate::settings::{fields_by_section, flags, Field};
use crate::CliError;
use clap::parser::ValueSource;
use clap::{ArgMatches, Args, Command, FromArgMatches};
use std::marker::PhantomData;

/// A settings field taken as one flag outside the relay.
pub(crate) trait Setting {
    /// The field's section (`relay`, `bullmq`).
    const SECTION: &'static str;
    /// The field's key.
    const KEY: &'static str;
    /// A default of this command's, when the field has none (or another).
    const DEFAULT: Option<&'static str> = None;
}

/// `--database-url`.
pub(crate) struct DatabaseUrl;

impl Setting for DatabaseUrl {
    const SECTION: &'static str = "relay";
    const KEY: &'static str = "database_url";
}

/// `--database-url`, with the local server as the default (the demo).
pub(crate) struct LocalDatabaseUrl;

impl Setting for LocalDatabaseUrl {
    const SECTION: &'static str = "relay";
    const KEY: &'static str = "database_url";
    const DEFAULT: Option<&'static str> =
        Some("postgres://postgres:postgres@127.0.0.1:5432/postgres");
}

/// `--redis-url` (the BullMQ sink's).
pub(crate) struct RedisUrl;

impl Setting for RedisUrl {
    const SECTION: &'static str = "bullmq";
    const KEY: &'static str = "redis_url";
}

/// The value of setting `S`: its flag, else its variable, else the
/// conventional variable, else the default.
pub(crate) struct Flag<S> {
    value: Option<String>,
    setting: PhantomData<S>,
}

impl<S: Setting> Flag<S> {
    fn field() -> Field {
        fields_by_section()
            .into_iter()
            .flat_map(|(_, f)| f)
            .find(|f| f.section == S::SECTION && f.key == S::KEY)
            .expect("a settings field")
    }

    fn id() -> String {
        format!("{}.{}", S::SECTION, S::KEY)
    }

    /// The value, if anything gave one.
    pub(crate) fn get(&self) -> Option<&str> {
        self.value.as_deref()
    }

    /// The value, or an error that says how to give one.
    pub(crate) fn required(&self) -> Result<&str, CliError> {
        self.get().ok_or_else(|| {
            let f = Self::field();
            let mut vars = vec![f.env.clone()];
            vars.extend(f.alias_env.iter().map(|e| e.to_string()));
            let what = if S::KEY == "database_url" {
                "no database"
            } else {
                "no URL"
            };
            format!("{what}: pass --{} or set {}", f.flag, vars.join(" or ")).into()
        })
    }
}

impl<S: Setting> FromArgMatches for Flag<S> {
    fn from_arg_matches(m: &ArgMatches) -> Result<Self, clap::Error> {
        let id = Self::id();
        let given = m.get_one::<String>(&id).cloned();
        let value = match m.value_source(&id) {
            Some(ValueSource::CommandLine) | Some(ValueSource::EnvVariable) => given,
            // Not given: the conventional variable before any default.
            _ => Self::field()
                .alias_env
                .iter()
                .find_map(|e| std::env::var(e).ok().filter(|v| !v.is_empty()))
                .or(given),
        };
        Ok(Flag {
            value,
            setting: PhantomData,
        })
    }

    fn update_from_arg_matches(&mut self, m: &ArgMatches) -> Result<(), clap::Error> {
        *self = Self::from_arg_matches(m)?;
        Ok(())
    }
}

impl<S: Setting> Args for Flag<S> {
    fn augment_args(cmd: Command) -> Command {
        let mut f = Self::field();
        if let Some(d) = S::DEFAULT {
            f.default = Some(toml::Value::String(d.to_owned()));
        }
        let mut arg = flags::arg(&f).expect("a flag");
        // No sections outside the relay: the short name first
        // (`--redis-url`, with `--bullmq-redis-url` beside it).
        if let Some(short) = f.alias_flags.first() {
            arg = arg
                .long(*short)
                .visible_alias(None)
                .visible_alias(f.flag.clone());
        }
        if let Some(alias) = f.alias_env.first() {
            arg = arg.help(format!("{} ({alias} when {} is unset)", f.summary(), f.env));
        }
        cmd.arg(arg)
    }

    fn augment_args_for_update(cmd: Command) -> Command {
        Self::augment_args(cmd)
    }
}

/// Open a session named `app` (so it is not mistaken for a relay in `pg_stat_activity`).
pub(crate) async fn connect(url: &str, app: &str) -> Result<sqlx::PgConnection, CliError> {
    let redacted = postbox_relay::Secret::new(url).redacted();
    // One server or a host list (`…@db1,db2/app?target_session_attrs=read-write`).
    let servers: postbox::Servers = url
        .parse()
        .map_err(|e| format!("invalid database URL {redacted}: {e}"))?;
    servers
        .connect(app, std::time::Duration::from_secs(10))
        .await
        .map_err(|e| {
            format!("cannot connect to PostgreSQL at {redacted}: {e}. Check the URL, that the server runs, and the credentials").into()
        })
}
