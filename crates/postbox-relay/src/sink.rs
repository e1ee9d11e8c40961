//! The seam between the relay and a broker.
//!
//! A broker crate implements [`Sink`]: how to encode one event, how to send a
//! wave (at most one event per key) or an atomic group and read the broker's
//! answer per message, and which failures are transient. The delivery layer
//! ([`Delivery`](crate::Delivery)) turns any `Sink` into a [`Destination`], the
//! batch-level interface the relay's workers and the [`Router`](crate::Router)
//! use; it alone owns per-key ordering.

use chrono::{DateTime, Utc};
use serde_json::Value;
use std::sync::Arc;
use uuid::Uuid;

pub use postbox::BoxError;

/// One claimed outbox row.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct OutboxEvent {
    /// Outbox id (delivery order).
    pub id: i64,
    /// Idempotency id (BullMQ jobId, Kafka header).
    pub event_id: Uuid,
    /// Queue / topic.
    pub topic: String,
    /// Event type (BullMQ job name).
    pub event: String,
    /// Ordering key.
    pub key: Option<String>,
    /// Body.
    pub payload: Value,
    /// Headers (JSON object).
    pub headers: Value,
    /// Poison failures so far.
    pub attempts: i32,
    /// When the producer wrote it.
    pub created_at: DateTime<Utc>,
    /// The schema whose outbox it came from (set by the relay, not a column).
    #[sqlx(skip)]
    pub schema: String,
}

impl OutboxEvent {
    /// The event in the envelope of the wire contract
    /// ([`postbox::wire::envelope`]), for sinks that offer one.
    pub fn envelope(&self) -> Value {
        let at = self
            .created_at
            .to_rfc3339_opts(chrono::SecondsFormat::Micros, true);
        postbox::wire::envelope(
            &self.event_id,
            &self.event,
            self.key.as_deref(),
            &at,
            &self.payload,
        )
    }
}

#[cfg(test)]
impl OutboxEvent {
    /// A row for unit tests.
    pub(crate) fn for_test(id: i64, key: Option<&str>, topic: &str) -> Self {
        OutboxEvent {
            id,
            event_id: uuid::Uuid::new_v4(),
            topic: topic.into(),
            event: "e".into(),
            key: key.map(Into::into),
            payload: serde_json::json!({}),
            headers: serde_json::json!({}),
            attempts: 0,
            created_at: chrono::Utc::now(),
            schema: "s".into(),
        }
    }
}

/// Why an event was not delivered (Vector's Errored vs Rejected).
#[derive(Debug, thiserror::Error)]
pub enum SinkError {
    /// The broker could not take it now (down, timeout, loading, read-only).
    /// Retried forever with backoff; never consumes `attempts`.
    #[error("broker unavailable: {message}")]
    Transient {
        /// What happened.
        message: String,
        /// The client's error.
        #[source]
        source: Option<BoxError>,
    },
    /// The broker or the sink refused this event itself (too large, invalid,
    /// not serialisable). Counts an attempt; dead-lettered after `max_attempts`.
    #[error("rejected: {message}")]
    Rejected {
        /// What happened.
        message: String,
        /// The client's error.
        #[source]
        source: Option<BoxError>,
    },
    /// Not sent because an earlier event of its key failed in this batch.
    #[error("not attempted: an earlier event of the same key was not delivered")]
    NotAttempted,
}

impl SinkError {
    /// A transient error with a message only.
    pub fn transient(message: impl Into<String>) -> Self {
        SinkError::Transient {
            message: message.into(),
            source: None,
        }
    }
    /// Whether another attempt may succeed without anyone acting (the broker
    /// is down or busy), as opposed to a refusal of this event.
    pub fn is_transient(&self) -> bool {
        matches!(self, SinkError::Transient { .. })
    }
    /// Whether the broker or the sink refused this event itself: another
    /// attempt counts, and the event is dead-lettered after `max_attempts`.
    pub fn is_rejected(&self) -> bool {
        matches!(self, SinkError::Rejected { .. })
    }
    /// The broker could not be reached for a whole wave: the same transient
    /// failure for each of its `n` messages.
    pub fn unreachable(n: usize, why: &dyn std::fmt::Display) -> Vec<Result<(), SinkError>> {
        (0..n)
            .map(|_| Err(SinkError::transient(why.to_string())))
            .collect()
    }
    /// A rejection with a message only.
    pub fn rejected(message: impl Into<String>) -> Self {
        SinkError::Rejected {
            message: message.into(),
            source: None,
        }
    }
}

/// What became of one event of a batch.
#[derive(Debug)]
pub enum Outcome {
    /// Acknowledged by the broker (or already there: same event id).
    Delivered,
    /// Not delivered.
    Failed(SinkError),
    /// Not delivered for a reason that may pass (transient), while the broker
    /// took other keys' events: this key waits out a backoff, without using
    /// an attempt, and holds no other key back.
    Deferred(SinkError),
}

/// An event with its encoding for one broker, as a sink sends it.
#[derive(Debug)]
pub struct Encoded<'a, M> {
    /// The outbox row.
    pub event: &'a OutboxEvent,
    /// What [`Sink::encode`] made of it.
    pub message: M,
}

/// The answer to an atomic group ([`Sink::send_group`]).
#[derive(Debug)]
pub enum GroupOutcome {
    /// The broker took every message of the group.
    Delivered,
    /// The connection failed: nothing or everything ran, so another attempt is
    /// safe. The batch counts as undelivered (transient).
    Failed(SinkError),
    /// The broker answered with an error for some message of the group without
    /// saying which; the delivery layer sends the batch again in waves (the
    /// sink's sends must be idempotent by event id).
    Unclear,
}

/// When a sink's atomic groups are used (see [`Sink::groups`]).
#[derive(Debug, Clone, Copy)]
pub struct GroupPolicy {
    /// Fewest events of one key a batch must hold to go as a group: below it,
    /// waves take about as few round trips and hold the broker less.
    pub min_key_depth: usize,
}

/// A broker, as the delivery layer drives it. Implementations bring their
/// config, their encoding and their error classes; never ordering code.
#[async_trait::async_trait]
pub trait Sink: Send + Sync + 'static {
    /// One event encoded for this broker.
    type Message: Send + Sync;

    /// Short name for logs and metrics (`"bullmq"`, `"kafka"`).
    fn name(&self) -> &'static str;

    /// Encode `event`, or refuse it with [`SinkError::Rejected`] naming the
    /// reason and the fix (too large, invalid destination name). No I/O.
    fn encode(&self, event: &OutboxEvent) -> Result<Self::Message, SinkError>;

    /// Send one wave and await the broker's acknowledgements. A wave holds at
    /// most one event per key, so its messages may go concurrently. Returns
    /// one result per message, in order. Sending an event id the broker
    /// already has must be a no-op that reports success, where the broker can
    /// tell (otherwise consumers' inboxes drop the duplicate).
    async fn send_wave(&self, wave: Vec<Encoded<'_, Self::Message>>) -> Vec<Result<(), SinkError>>;

    /// Whether and when this sink sends a batch as one atomic group
    /// ([`send_group`](Sink::send_group)). Default: never.
    fn groups(&self) -> Option<GroupPolicy> {
        None
    }

    /// Send a whole batch as one unit the broker runs in order and all at
    /// once (BullMQ: one `MULTI`/`EXEC`). Every key's events share one topic.
    /// Only called when [`groups`](Sink::groups) is `Some`.
    async fn send_group(&self, _group: Vec<Encoded<'_, Self::Message>>) -> GroupOutcome {
        GroupOutcome::Unclear
    }

    /// Called after a batch met a transient failure: drop connections or
    /// producers so the next attempt starts fresh.
    async fn reset(&self) {}

    /// Whether the broker is reachable now (for readiness).
    async fn check(&self) -> Result<(), SinkError> {
        Ok(())
    }
}

/// Where a claimed batch goes: a [`Delivery`](crate::Delivery) around one
/// sink, or a [`Router`](crate::Router) over several.
#[async_trait::async_trait]
pub trait Destination: Send + Sync + 'static {
    /// Short name for logs ("bullmq", "kafka", "router").
    fn name(&self) -> &'static str;

    /// Publish `batch` (in outbox id order) and await the broker's
    /// acknowledgements. Returns one [`Outcome`] per event, in the same order,
    /// by `deadline` (the relay's `publish_timeout`): what the broker
    /// acknowledged before it is [`Outcome::Delivered`], a send cut off by it
    /// a transient failure, what was not sent [`SinkError::NotAttempted`].
    ///
    /// Contract: an event may be delivered only if every earlier event with the
    /// same key in this batch was delivered; after a failure, later events of
    /// that key must not reach the broker.
    async fn publish(&self, batch: &[OutboxEvent], deadline: tokio::time::Instant) -> Vec<Outcome>;

    /// Whether the broker is reachable now (for readiness).
    async fn check(&self) -> Result<(), SinkError>;

    /// A send was cut off (no answer within `publish_timeout`): drop connections and clients, whose state a
    /// cancelled send may have left half-done (an AMQP channel's confirm
    /// numbering, a producer's sequence), so the next batch starts afresh.
    async fn reset(&self) {}

    /// For a destination made of sinks (a [`Router`](crate::Router)): the
    /// same destination with each of its sinks replaced by `wrap`'s answer,
    /// so the relay tracks each sink's health on its own. `None` for a sink,
    /// which the relay wraps whole.
    fn with_sinks_wrapped(
        &self,
        _wrap: &mut dyn FnMut(Arc<dyn Destination>) -> Arc<dyn Destination>,
    ) -> Option<Arc<dyn Destination>> {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_envelope_carries_id_type_key_time_and_payload() {
        let mut e = OutboxEvent::for_test(1, Some("order-7"), "payments");
        e.payload = serde_json::json!({"amount": 42});
        e.created_at = "2026-12-06T19:40:59.123456789Z".parse().unwrap();
        assert_eq!(
            e.envelope(),
            serde_json::json!({
                "id": e.event_id,
                "type": "e",
                "key": "order-7",
                "timestamp": "2026-12-06T19:40:59.123456Z",
                "data": {"amount": 42},
            })
        );
        e.key = None;
        assert_eq!(e.envelope()["key"], serde_json::Value::Null);
    }
}
