//! What the relay needs from a broker: publish a batch, say per event whether
//! the broker acknowledged it, and whether a failure is worth retrying.

use chrono::{DateTime, Utc};
use serde_json::Value;
use uuid::Uuid;

/// A boxed error source.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

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
    /// A rejection with a message only.
    pub fn rejected(message: impl Into<String>) -> Self {
        SinkError::Rejected {
            message: message.into(),
            source: None,
        }
    }
}

/// The broker's answer for one event.
#[derive(Debug)]
pub enum Delivery {
    /// Acknowledged by the broker (or already there: same event id).
    Delivered,
    /// Not delivered.
    Failed(SinkError),
}

/// A broker the relay publishes to.
#[async_trait::async_trait]
pub trait Sink: Send + Sync + 'static {
    /// Short name for logs ("bullmq", "kafka").
    fn name(&self) -> &'static str;

    /// Publish `batch` (in outbox id order) and await the broker's
    /// acknowledgements. Returns one [`Delivery`] per event, in the same order.
    ///
    /// Contract: an event may be delivered only if every earlier event with the
    /// same key in this batch was delivered; after a failure, later events of
    /// that key must not reach the broker ([`waves`](crate::waves) helps).
    /// Publishing an event id that the broker already has must be a no-op
    /// reported as `Delivered`.
    async fn publish(&self, batch: &[OutboxEvent]) -> Vec<Delivery>;

    /// Whether the broker is reachable now (for readiness).
    async fn check(&self) -> Result<(), SinkError> {
        Ok(())
    }
}
