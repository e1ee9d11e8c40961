//! The relay's Redis Streams sink. Each event is one `XADD` to the stream of
//! its topic. With `publish = "script"` (the default), a batch in which some
//! key has two or more events goes as one script, `append_all.lua`, which
//! appends every entry in batch order. Otherwise a wave's entries go out as
//! one pipeline and each entry's answer is classified on its own, so one
//! refused entry (a key of another type where the stream should be) is
//! rejected while the others are stored.
//!
//! Order: the delivery layer sends at most one event per key per wave and
//! awaits the wave before the next, or the whole batch as the script, which
//! Redis runs with nothing in between. The script checks every stream's type
//! before it appends anything, so its error reply nearly always means nothing
//! was written; the layer then sends the batch in waves. An error after some
//! `XADD`s (out of memory) makes the waves append those entries again:
//! duplicates, which the inbox drops as after a relay crash, each key's first
//! occurrences still in order. An entry is stored once `XADD` returned its id
//! (with AOF `appendfsync always` also on disk).

use crate::config::{PublishMode, RedisStreamsConfig};
use crate::{FIELD_EVENT, FIELD_HEADERS, FIELD_ID, FIELD_KEY, FIELD_PAYLOAD};
use postbox_relay::cloudevents::{Binding, CloudEvents};
use postbox_relay::{
    Encoded, GroupOutcome, GroupPolicy, OutboxEvent, Reconnecting, Sink, SinkError,
};
use redis::aio::MultiplexedConnection;
use std::borrow::Cow;

/// Fewest events of one key for a batch to go as one script: with one event
/// per key, a batch is one wave, one pipeline, already one round trip.
const GROUP_MIN_DEPTH: usize = 2;

/// One event as a stream entry.
#[derive(Debug)]
pub struct Outgoing {
    stream: String,
    fields: Vec<(Cow<'static, str>, String)>,
}

/// Appends outbox events to Redis streams.
pub struct RedisStreamsSink {
    config: RedisStreamsConfig,
    client: redis::Client,
    connection: Reconnecting<MultiplexedConnection>,
    /// `append_all.lua`, sent by its SHA1 (loaded again after a Redis restart).
    append_all: redis::Script,
    /// `format = "cloudevents"`: the writer (set by the relay's config).
    cloudevents: Option<CloudEvents>,
}

impl RedisStreamsSink {
    /// The sink; it connects on first use, so the relay starts while Redis is down.
    pub fn new(config: RedisStreamsConfig) -> Result<Self, postbox_relay::ConfigError> {
        config.validate()?;
        let client =
            redis::Client::open(config.url.expose()).map_err(|e| postbox_relay::ConfigError {
                field: "redis_streams.url",
                reason: e.to_string(),
            })?;
        Ok(RedisStreamsSink {
            config,
            client,
            connection: Reconnecting::new(),
            append_all: redis::Script::new(include_str!("append_all.lua")),
            cloudevents: None,
        })
    }

    /// Write CloudEvents (`format = "cloudevents"`), or postbox's format
    /// with `None` (what [`new`](Self::new) does).
    pub fn with_cloudevents(mut self, writer: Option<CloudEvents>) -> Self {
        self.cloudevents = writer;
        self
    }

    async fn connection(&self) -> Result<MultiplexedConnection, SinkError> {
        self.connection
            .get(|| async {
                self.client
                    .get_multiplexed_async_connection()
                    .await
                    .map_err(|e| {
                        SinkError::transient(format!(
                            "connecting to {}: {e}",
                            self.config.url.redacted()
                        ))
                    })
            })
            .await
    }
}

/// A refused entry is the stream's problem only when the key holds another
/// type; the rest (out of memory, read-only replica, loading) is the server's
/// state and passes.
fn classify(e: &redis::RedisError, stream: &str) -> SinkError {
    match e.code() {
        Some("WRONGTYPE") => SinkError::rejected(format!(
            "key {stream:?} holds a value of another type, not a stream: rename or delete it, or change redis_streams.stream ({e})"
        )),
        _ => SinkError::transient(format!("XADD to {stream:?}: {e}")),
    }
}

/// The batch script of `n` entries failed. Redis answered with an error
/// (the script's type check, an ACL refusal, out of memory): waves find out
/// which entry it was about. No answer (the connection): the batch waits.
fn group_failed(e: &redis::RedisError, n: usize) -> GroupOutcome {
    if e.code().is_some() {
        tracing::debug!(error = %e, "error reply to the batch script");
        GroupOutcome::Unclear
    } else {
        GroupOutcome::Failed(SinkError::transient(format!("appending {n} entries: {e}")))
    }
}

#[async_trait::async_trait]
impl Sink for RedisStreamsSink {
    type Message = Outgoing;

    fn name(&self) -> &'static str {
        "redis_streams"
    }

    fn encode(&self, e: &OutboxEvent) -> Result<Outgoing, SinkError> {
        let mut fields: Vec<(Cow<'static, str>, String)> = Vec::new();
        if let Some(ce) = &self.cloudevents {
            // No binding exists for Redis Streams: the attributes are fields
            // named as HTTP names its headers, the body is field `payload`.
            let wire = ce.wire(e, Binding::Http)?;
            fields.extend(wire.headers.into_iter().map(|(n, v)| (n.into(), v)));
            let body = String::from_utf8(wire.body).expect("JSON is UTF-8");
            fields.push((FIELD_PAYLOAD.into(), body));
        } else {
            fields.push((FIELD_ID.into(), e.event_id.to_string()));
            fields.push((FIELD_EVENT.into(), e.event.clone()));
            if let Some(key) = &e.key {
                fields.push((FIELD_KEY.into(), key.clone()));
            }
            let payload = serde_json::to_string(&e.payload).expect("JSON values serialise");
            fields.push((FIELD_PAYLOAD.into(), payload));
            // The one rule every sink forwards headers by (bad trace context dropped).
            let headers: serde_json::Map<String, serde_json::Value> =
                postbox_relay::headers::forwarded(e)
                    .into_iter()
                    .map(|(name, text)| (name.to_owned(), serde_json::Value::String(text)))
                    .collect();
            if !headers.is_empty() {
                let headers = serde_json::Value::Object(headers).to_string();
                fields.push((FIELD_HEADERS.into(), headers));
            }
        }
        Ok(Outgoing {
            stream: self.config.stream_for(&e.topic)?,
            fields,
        })
    }

    async fn send_wave(&self, wave: Vec<Encoded<'_, Outgoing>>) -> Vec<Result<(), SinkError>> {
        let mut connection = match self.connection().await {
            Ok(c) => c,
            Err(e) => return SinkError::unreachable(wave.len(), &e),
        };
        let mut pipe = redis::pipe();
        for m in &wave {
            let cmd = pipe.cmd("XADD").arg(&m.message.stream);
            if let Some(n) = self.config.maxlen {
                cmd.arg("MAXLEN").arg("~").arg(n);
            }
            cmd.arg("*");
            for (name, value) in &m.message.fields {
                cmd.arg(name.as_ref()).arg(value);
            }
        }
        let answers: Vec<redis::RedisResult<String>> =
            match pipe.ignore_errors().query_async(&mut connection).await {
                Ok(a) => a,
                Err(e) => {
                    return SinkError::unreachable(wave.len(), &format!("XADD pipeline: {e}"))
                }
            };
        wave.iter()
            .zip(answers)
            .map(|(m, answer)| {
                answer
                    .map(|_| ())
                    .map_err(|e| classify(&e, &m.message.stream))
            })
            .collect()
    }

    fn groups(&self) -> Option<GroupPolicy> {
        (self.config.publish == PublishMode::Script).then_some(GroupPolicy {
            min_key_depth: GROUP_MIN_DEPTH,
        })
    }

    /// The batch as one run of `append_all.lua`: one round trip however deep
    /// its keys are, where waves take one per event of the deepest key.
    async fn send_group(&self, group: Vec<Encoded<'_, Outgoing>>) -> GroupOutcome {
        let mut connection = match self.connection().await {
            Ok(c) => c,
            Err(e) => return GroupOutcome::Failed(e),
        };
        let mut script = self.append_all.prepare_invoke();
        for m in &group {
            script.key(&m.message.stream);
        }
        match self.config.maxlen {
            Some(n) => script.arg(n),
            None => script.arg(""),
        };
        for m in &group {
            script.arg(m.message.fields.len());
            for (name, value) in &m.message.fields {
                script.arg(name.as_ref()).arg(value);
            }
        }
        match script.invoke_async::<usize>(&mut connection).await {
            Ok(n) if n == group.len() => GroupOutcome::Delivered,
            Ok(n) => {
                tracing::error!(appended = n, expected = group.len(), "append_all.lua appended another number of entries than it was given; sending the batch again in waves");
                GroupOutcome::Unclear
            }
            Err(e) => group_failed(&e, group.len()),
        }
    }

    /// Drop the connection after a transient failure; the next batch connects afresh.
    async fn reset(&self) {
        self.connection.reset().await;
    }

    async fn check(&self) -> Result<(), SinkError> {
        let mut c = self.connection().await?;
        redis::cmd("PING")
            .query_async::<String>(&mut c)
            .await
            .map(|_| ())
            .map_err(|e| SinkError::transient(format!("PING: {e}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An error reply as redis-rs reads it off the wire (`-CODE detail`).
    fn reply(line: &str) -> redis::RedisError {
        redis::parse_redis_value(format!("-{line}\r\n").as_bytes())
            .expect("a RESP error reply")
            .extract_error()
            .expect_err("an error reply is an error")
    }

    /// What redis-rs returns when nothing listens on the port.
    async fn refused() -> redis::RedisError {
        let port = postbox_testkit::free_port();
        redis::Client::open(format!("redis://127.0.0.1:{port}/"))
            .expect("a valid URL")
            .get_multiplexed_async_connection()
            .await
            .expect_err("nothing listens on a port just freed")
    }

    #[test]
    fn a_stream_key_of_another_type_is_a_refusal_of_that_event() {
        let e = reply("WRONGTYPE Operation against a key holding the wrong kind of value");
        assert!(classify(&e, "orders").is_rejected());
    }

    #[test]
    fn any_other_error_reply_is_the_servers_state_and_transient() {
        for line in [
            "OOM command not allowed when used memory > 'maxmemory'.",
            "READONLY You can't write against a read only replica.",
            "LOADING Redis is loading the dataset in memory",
            "BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSCRIPT.",
            "MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'.",
            "NOPERM No permissions to access a key",
            "ERR max number of clients reached",
        ] {
            assert!(classify(&reply(line), "orders").is_transient(), "{line}");
        }
    }

    #[tokio::test]
    async fn a_failed_connection_is_transient() {
        let e = refused().await;
        assert!(e.is_connection_refusal(), "{e}");
        assert!(classify(&e, "orders").is_transient());
        let e: redis::RedisError = std::io::Error::from(std::io::ErrorKind::ConnectionReset).into();
        assert!(classify(&e, "orders").is_transient());
    }

    #[test]
    fn an_error_reply_to_the_batch_script_is_unclear() {
        for line in [
            "WRONGTYPE key orders holds a string, not a stream",
            "OOM command not allowed when used memory > 'maxmemory'.",
            "NOPERM User relay has no permissions to run the 'evalsha' command",
            "ERR user_script:1: Script attempted to access nonexistent global variable 'x'",
        ] {
            assert!(
                matches!(group_failed(&reply(line), 3), GroupOutcome::Unclear),
                "{line}"
            );
        }
    }

    #[tokio::test]
    async fn a_batch_script_without_an_answer_failed_and_is_transient() {
        let errors = [
            refused().await,
            std::io::Error::from(std::io::ErrorKind::TimedOut).into(),
            (
                redis::ErrorKind::Io,
                "Multiplexed connection driver unexpectedly terminated",
            )
                .into(),
        ];
        for e in errors {
            match group_failed(&e, 3) {
                GroupOutcome::Failed(failed) => assert!(failed.is_transient(), "{e}"),
                other => panic!("{e}: {other:?}"),
            }
        }
    }
}
