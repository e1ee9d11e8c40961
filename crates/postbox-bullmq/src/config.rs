//! Settings of the BullMQ sink (`[bullmq]` in the relay's config file).

use postbox_relay::Secret;
use serde::{Deserialize, Serialize};

/// What job data the sink accepts.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum PayloadPolicy {
    /// Only JSON objects (what BullMQ clients' typings expect of `job.data`).
    #[default]
    Object,
    /// Any JSON value.
    Any,
}

/// How the sink sends a batch to Redis.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum PublishMode {
    /// The whole batch as one `MULTI`/`EXEC` transaction of BullMQ's own add
    /// scripts (the crate's atomic bulk add): two round trips per batch, and
    /// Redis runs all of it or none of it, in order. On an error inside the
    /// transaction the batch is sent again in `waves` to learn which jobs
    /// failed (adds of existing jobIds are no-ops).
    #[default]
    Transaction,
    /// One event per key per awaited round trip (a batch of depth *d* per key
    /// takes *d* round trips); Redis runs other clients' commands in between.
    Waves,
}

/// BullMQ sink settings (`[bullmq]` in the config file).
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct BullmqConfig {
    /// Redis URL (`redis://`, or `rediss://` for TLS; `rediss://…/#insecure`
    /// accepts a certificate signed by a private CA).
    pub redis_url: Secret,
    /// BullMQ key prefix, as the workers use it.
    pub prefix: String,
    /// Accepted job data: `object` (what BullMQ clients' typings expect) or `any`.
    pub payload: PayloadPolicy,
    /// Largest job data (serialised JSON, bytes) accepted; larger events are
    /// rejected (and dead-lettered after `max_attempts`).
    pub max_job_bytes: usize,
    /// Job-data field that carries the row's W3C trace context
    /// (`{"traceparent": ..., "tracestate": ...}`) when the row has a valid
    /// `traceparent` header and the payload is an object without that field;
    /// read it in Rust with `postbox_bullmq::trace_context(&job)`, in Node as
    /// `job.data._trace`. Empty: never add it (job data = payload). (Job
    /// options would be the natural place, as Node's `opts.telemetry`, but
    /// the pinned `bullmq` crate cannot write them.)
    pub trace_field: String,
    /// How a batch with a deep key is sent: `transaction` (one `MULTI`/`EXEC`)
    /// or `waves` (one round trip per event of the deepest key).
    pub publish: PublishMode,
    /// How long a completed job stays in Redis: each job is added with
    /// `removeOnComplete: { age }`, which Node and Rust workers honour when
    /// they complete a job. A re-send of an event (a relay killed between
    /// publishing and committing, and another taking over) is dropped by its
    /// jobId only while the job is kept; later the consumer's inbox skips it.
    /// Whole seconds; `0s` removes a job as soon as it completes.
    #[serde(with = "humantime_serde")]
    #[schemars(with = "postbox_relay::HumanDuration")]
    pub keep_completed: std::time::Duration,
    /// `postbox` (job data = the payload, with `_postbox` and the trace
    /// field beside its fields) or `cloudevents` (job data = the CloudEvents
    /// 1.0 JSON-format event, the payload as its `data`; jobs carry no
    /// headers, so structured mode is the only one).
    pub format: postbox_relay::cloudevents::Format,
}

impl Default for BullmqConfig {
    fn default() -> Self {
        BullmqConfig {
            redis_url: Secret::new("redis://127.0.0.1:6379"),
            prefix: "bull".into(),
            payload: PayloadPolicy::Object,
            max_job_bytes: 1 << 20,
            trace_field: crate::TRACE_FIELD.into(),
            publish: PublishMode::Transaction,
            keep_completed: std::time::Duration::from_secs(3600),
            format: Default::default(),
        }
    }
}

impl postbox_relay::Section for BullmqConfig {
    const NAME: &'static str = "bullmq";
    const ALIASES: &'static [postbox_relay::Alias] = &[postbox_relay::Alias {
        field: "redis_url",
        flags: &["redis-url"],
        env: &["POSTBOX_REDIS_URL", "REDIS_URL"],
    }];
}

impl postbox_relay::SinkConfig for BullmqConfig {
    type Sink = crate::BullmqSink;

    fn sink(self, relay: &postbox_relay::Config) -> Result<Self::Sink, postbox_relay::ConfigError> {
        let structured = postbox_relay::cloudevents::Mode::Structured;
        let ce = postbox_relay::cloudevents::CloudEvents::for_sink(self.format, structured, relay)?;
        Ok(crate::BullmqSink::new(self)?.with_cloudevents(ce))
    }

    fn describe(&self) -> String {
        format!("BullMQ on {} (prefix {})", self.redis_url, self.prefix)
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
        if self.trace_field.trim() != self.trace_field {
            return Err(postbox_relay::ConfigError {
                field: "bullmq.trace_field",
                reason: format!(
                    "{:?} has leading or trailing spaces; use a plain field name, or \"\" to turn it off",
                    self.trace_field
                ),
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
