//! Settings of the BullMQ sink (`[bullmq]` in the relay's config file).

use postbox_relay::Secret;
use serde::{Deserialize, Serialize};

/// What job data the sink accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PayloadPolicy {
    /// Only JSON objects (what BullMQ clients' typings expect of `job.data`).
    #[default]
    Object,
    /// Any JSON value.
    Any,
}

/// BullMQ sink settings.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct BullmqConfig {
    /// Redis URL (`redis://`, or `rediss://` for TLS). Default: `redis://127.0.0.1:6379`.
    /// Env: `POSTBOX_REDIS_URL` or `REDIS_URL`.
    pub redis_url: Secret,
    /// BullMQ key prefix, as the workers use it. Default: `bull`.
    pub prefix: String,
    /// Accepted job data: `object` or `any`. Default: `object`.
    pub payload: PayloadPolicy,
    /// Largest job data (serialised JSON) accepted; larger events are rejected
    /// (and dead-lettered after `max_attempts`). Default: 1048576 (1 MiB).
    pub max_job_bytes: usize,
}

impl Default for BullmqConfig {
    fn default() -> Self {
        BullmqConfig {
            redis_url: Secret::new("redis://127.0.0.1:6379"),
            prefix: "bull".into(),
            payload: PayloadPolicy::Object,
            max_job_bytes: 1 << 20,
        }
    }
}

impl BullmqConfig {
    /// Check the settings once at start-up.
    pub fn validate(&self) -> Result<(), postbox_relay::ConfigError> {
        let url = self.redis_url.expose();
        if !(url.starts_with("redis://")
            || url.starts_with("rediss://")
            || url.starts_with("redis+unix://")
            || url.starts_with("unix://"))
        {
            return Err(postbox_relay::ConfigError {
                field: "bullmq.redis_url",
                reason: format!("{} is not a redis:// or rediss:// URL", self.redis_url),
            });
        }
        if self.prefix.is_empty() || self.prefix.contains(':') {
            return Err(postbox_relay::ConfigError {
                field: "bullmq.prefix",
                reason: format!("{:?} must be non-empty and contain no ':'", self.prefix),
            });
        }
        if self.max_job_bytes == 0 {
            return Err(postbox_relay::ConfigError {
                field: "bullmq.max_job_bytes",
                reason: "must be greater than zero".into(),
            });
        }
        Ok(())
    }
}
