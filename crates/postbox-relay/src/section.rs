//! Config sections: each setting is defined once, as a documented field of a
//! typed struct. The struct's serde shape gives the TOML keys, its `Default`
//! the defaults, its doc comments (through its JSON schema) the help text;
//! the CLI derives the `--flags`, the `POSTBOX_*` environment variables and
//! the reference (`postbox relay --print-config --defaults`) from them.

use crate::{Config, ConfigError, Destination};
use serde::{de::DeserializeOwned, Serialize};
use std::sync::Arc;

/// A section of the relay's settings (`[relay]`, `[bullmq]`, `[kafka]`…).
pub trait Section: Serialize + DeserializeOwned + schemars::JsonSchema + Default {
    /// The TOML table. Flags are `--<name>-<field>` and environment variables
    /// `POSTBOX_<NAME>_<FIELD>`, except for the relay's own section, whose
    /// fields are `--<field>` and `POSTBOX_<FIELD>`.
    const NAME: &'static str;

    /// Further names a field answers to (shorter flags, conventional
    /// environment variables such as `DATABASE_URL`).
    const ALIASES: &'static [Alias] = &[];

    /// Former names of fields, still read (in the file, as flags and as
    /// environment variables) with a warning, for one release.
    const RENAMED: &'static [Renamed] = &[];
}

/// A field's former name (`kafka.topic_map`, now `kafka.topics`).
#[derive(Debug, Clone, Copy)]
pub struct Renamed {
    /// The former TOML key; its flag and variable follow from it as any
    /// field's do.
    pub old: &'static str,
    /// The field (TOML key) it now sets.
    pub new: &'static str,
}

/// Further names of one field, on the command line and in the environment.
#[derive(Debug, Clone, Copy)]
pub struct Alias {
    /// The field (TOML key).
    pub field: &'static str,
    /// Flags (without `--`) that set it too.
    pub flags: &'static [&'static str],
    /// Environment variables read when neither its flag, its own variable nor
    /// the file sets it, in this order.
    pub env: &'static [&'static str],
}

/// A broker's section: it builds the [`Destination`] the relay publishes to.
pub trait SinkConfig: Section {
    /// The sink this section builds.
    type Sink: crate::Sink;

    /// Build the sink (it connects lazily). The settings are checked here,
    /// [`client_timeout`](Self::client_timeout) excepted.
    fn sink(self, relay: &Config) -> Result<Self::Sink, ConfigError>;

    /// The broker client's own deadline for one publish, as (setting, value),
    /// if it has one: it must give up before the relay gives up on the batch
    /// (`relay.publish_timeout`), or its late answer would be lost.
    fn client_timeout(&self) -> Option<(&'static str, std::time::Duration)> {
        None
    }

    /// Checked against the relay's settings, built, and wrapped in the
    /// delivery layer (per-key order and outcome classes are its job).
    fn build(self, relay: &Config) -> Result<Arc<dyn Destination>, ConfigError>
    where
        Self: Sized,
    {
        if let Some((field, timeout)) = self.client_timeout() {
            if timeout >= relay.publish_timeout {
                let show = humantime_serde::re::humantime::format_duration;
                return Err(ConfigError {
                    field,
                    reason: format!(
                        "{} must be shorter than relay.publish_timeout ({}); lower it or raise publish_timeout",
                        show(timeout),
                        show(relay.publish_timeout)
                    ),
                });
            }
        }
        Ok(Arc::new(crate::Delivery::new(self.sink(relay)?)))
    }

    /// Where it publishes, for the start-up log line (no secrets).
    fn describe(&self) -> String;
}

/// JSON-schema stand-in for a duration written `500ms`, `2s`, `5m`, `7d`:
/// `#[schemars(with = "postbox_relay::HumanDuration")]` on such a field.
pub struct HumanDuration;

impl schemars::JsonSchema for HumanDuration {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "HumanDuration".into()
    }
    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({ "type": "string", "format": "duration" })
    }
    fn inline_schema() -> bool {
        true
    }
}

impl schemars::JsonSchema for crate::Secret {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Secret".into()
    }
    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({ "type": "string", "format": "secret-url" })
    }
    fn inline_schema() -> bool {
        true
    }
}
