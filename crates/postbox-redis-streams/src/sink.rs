//! The relay's Redis Streams sink. Each event is one `XADD` to the stream of
//! its topic; a wave's entries go out as one pipeline and each entry's
//! answer is classified on its own, so one refused entry (a key of another
//! type where the stream should be) is rejected while the others are stored.
//!
//! Order: the delivery layer sends at most one event per key per wave and
//! awaits the wave before the next, so a key's events are appended in outbox
//! order. Redis executes a pipeline in order, and an entry is stored once
//! `XADD` returned its id (with AOF `appendfsync always` also on disk).

use crate::config::RedisStreamsConfig;
use crate::{FIELD_EVENT, FIELD_HEADERS, FIELD_ID, FIELD_KEY, FIELD_PAYLOAD};
use postbox_relay::{Encoded, OutboxEvent, Sink, SinkError};
use redis::aio::MultiplexedConnection;

/// One event as a stream entry.
#[derive(Debug)]
pub struct Outgoing {
    stream: String,
    fields: Vec<(&'static str, String)>,
}

/// Appends outbox events to Redis streams.
pub struct RedisStreamsSink {
    config: RedisStreamsConfig,
    client: redis::Client,
    connection: tokio::sync::Mutex<Option<MultiplexedConnection>>,
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
            connection: tokio::sync::Mutex::new(None),
        })
    }

    async fn connection(&self) -> Result<MultiplexedConnection, SinkError> {
        let mut held = self.connection.lock().await;
        if let Some(c) = held.as_ref() {
            return Ok(c.clone());
        }
        let c = self
            .client
            .get_multiplexed_async_connection()
            .await
            .map_err(|e| {
                SinkError::transient(format!("connecting to {}: {e}", self.config.url.redacted()))
            })?;
        *held = Some(c.clone());
        Ok(c)
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

#[async_trait::async_trait]
impl Sink for RedisStreamsSink {
    type Message = Outgoing;

    fn name(&self) -> &'static str {
        "redis_streams"
    }

    fn encode(&self, e: &OutboxEvent) -> Result<Outgoing, SinkError> {
        let payload = serde_json::to_string(&e.payload)
            .map_err(|err| SinkError::rejected(format!("payload is not serialisable: {err}")))?;
        let mut fields = vec![
            (FIELD_ID, e.event_id.to_string()),
            (FIELD_EVENT, e.event.clone()),
        ];
        if let Some(key) = &e.key {
            fields.push((FIELD_KEY, key.clone()));
        }
        fields.push((FIELD_PAYLOAD, payload));
        // The one rule every sink forwards headers by (bad trace context dropped).
        let headers: serde_json::Map<String, serde_json::Value> =
            postbox_relay::headers::forwarded(e)
                .into_iter()
                .map(|(name, text)| (name.to_owned(), serde_json::Value::String(text)))
                .collect();
        if !headers.is_empty() {
            fields.push((
                FIELD_HEADERS,
                serde_json::Value::Object(headers).to_string(),
            ));
        }
        Ok(Outgoing {
            stream: self.config.stream_for(&e.topic),
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
                cmd.arg(*name).arg(value);
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

    /// Drop the connection after a transient failure; the next batch connects afresh.
    async fn reset(&self) {
        *self.connection.lock().await = None;
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
