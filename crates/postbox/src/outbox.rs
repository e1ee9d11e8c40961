//! The producer side: write events into the outbox inside the caller's transaction.

use crate::error::{EnqueueError, InvalidEvent, InvalidIdentifier};
use crate::sql::{Queries, Statements};
use crate::{SchemaName, DEFAULT_SCHEMA};
use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::PgConnection;
use std::sync::{Arc, OnceLock};
use std::time::Duration;
use uuid::Uuid;

/// How far ahead [`Event::deliver_at`] may be by default
/// ([`Outbox::max_delay`]): a year.
pub const DEFAULT_MAX_DELAY: Duration = Duration::from_secs(366 * 24 * 3600);

/// An event to enqueue. Build with [`Event::new`] and the chained setters.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    /// Destination: BullMQ queue name or Kafka topic.
    pub topic: String,
    /// Event type, e.g. `message.created` (BullMQ job name).
    pub event: String,
    /// Ordering key: events with the same key are delivered in order.
    pub key: Option<String>,
    /// The event body.
    pub payload: Value,
    /// W3C `traceparent` and user headers (a JSON object).
    pub headers: Value,
    /// Idempotency id; when `None`, [`Outbox::enqueue`] makes a UUIDv7 (time
    /// ordered, so the outbox's unique index on it grows at its right edge).
    pub event_id: Option<Uuid>,
    /// Deliver at or after this time ([`Event::deliver_at`]); `None`: now.
    pub deliver_at: Option<DateTime<Utc>>,
}

impl Event {
    /// A new event for `topic` of type `event` carrying `payload`.
    pub fn new(topic: impl Into<String>, event: impl Into<String>, payload: Value) -> Self {
        Event {
            topic: topic.into(),
            event: event.into(),
            key: None,
            payload,
            headers: Value::Object(Default::default()),
            event_id: None,
            deliver_at: None,
        }
    }
    /// Set the ordering key.
    pub fn key(mut self, key: impl Into<String>) -> Self {
        self.key = Some(key.into());
        self
    }
    /// Set the idempotency id (e.g. your message id).
    pub fn event_id(mut self, id: Uuid) -> Self {
        self.event_id = Some(id);
        self
    }
    /// Set one header.
    pub fn header(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        if let Value::Object(map) = &mut self.headers {
            map.insert(name.into(), Value::String(value.into()));
        }
        self
    }

    /// Deliver at or after `at`, not before. The event waits in
    /// `outbox_scheduled` (committed with your transaction, so a relay
    /// restarted meanwhile still delivers it on time) and enters the outbox
    /// when due: from then on it is in its key's order like a new event, and
    /// it holds back none of its key's events before that. A time already
    /// past delivers now. [`Outbox::cancel`] takes it back before it is due.
    pub fn deliver_at(mut self, at: DateTime<Utc>) -> Self {
        self.deliver_at = Some(at);
        self
    }

    /// Set the W3C `traceparent` header (checked when the event is enqueued),
    /// so consumers continue the producer's trace.
    pub fn traceparent(self, traceparent: impl Into<String>) -> Self {
        self.header(crate::trace::TRACEPARENT, traceparent)
    }

    fn validate(&self) -> Result<(), InvalidEvent> {
        if self.topic.trim().is_empty() {
            return Err(InvalidEvent::EmptyTopic);
        }
        if self.event.trim().is_empty() {
            return Err(InvalidEvent::EmptyEventType {
                topic: self.topic.clone(),
            });
        }
        if !self.headers.is_object() {
            return Err(InvalidEvent::HeadersNotAnObject {
                found: json_kind(&self.headers),
            });
        }
        if let Some(tp) = self.headers.get(crate::trace::TRACEPARENT) {
            let tp = tp.as_str().ok_or(InvalidEvent::TraceparentNotAString {
                found: json_kind(tp),
            })?;
            crate::trace::check_traceparent(tp)?;
        }
        Ok(())
    }
}

pub(crate) fn json_kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Where an enqueued event landed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Enqueued {
    /// Outbox row id (delivery order); for an event scheduled ahead
    /// ([`Event::deliver_at`]), its row id in `outbox_scheduled` (it takes an
    /// outbox id when it is due).
    pub id: i64,
    /// The event's idempotency id.
    pub event_id: Uuid,
}

/// The outbox of one schema. Cheap to clone; create once and share.
#[derive(Debug, Clone)]
pub struct Outbox {
    schema: SchemaName,
    queries: Arc<Queries>,
    statements: Statements,
    max_delay: Duration,
}

impl Outbox {
    /// The outbox in `schema` (validated here; the tables come from `postbox migrate`).
    pub fn new(schema: &str) -> Result<Self, InvalidIdentifier> {
        let schema = SchemaName::new(schema)?;
        Ok(Outbox {
            queries: Arc::new(Queries::new(&schema)),
            schema,
            statements: Statements::Named,
            max_delay: DEFAULT_MAX_DELAY,
        })
    }

    /// How far ahead [`Event::deliver_at`] may be ([`DEFAULT_MAX_DELAY`], a
    /// year): an event scheduled further is refused
    /// ([`InvalidEvent::DeliverAtTooFar`]), which catches a time unit mixed up.
    pub fn max_delay(mut self, max_delay: Duration) -> Self {
        self.max_delay = max_delay;
        self
    }

    /// When `event` waits in `outbox_scheduled`: a `deliver_at` still ahead
    /// (and not too far). `None`: into the outbox now.
    fn scheduled(&self, event: &Event) -> Result<Option<DateTime<Utc>>, InvalidEvent> {
        let Some(at) = event.deliver_at else {
            return Ok(None);
        };
        let now = Utc::now();
        if at <= now {
            return Ok(None);
        }
        let too_far = chrono::Duration::from_std(self.max_delay)
            .ok()
            .and_then(|d| now.checked_add_signed(d))
            .is_some_and(|limit| at > limit);
        if too_far {
            return Err(InvalidEvent::DeliverAtTooFar {
                deliver_at: at,
                max_days: self.max_delay.as_secs() / 86_400,
            });
        }
        Ok(Some(at))
    }

    /// Take back a scheduled event ([`Event::deliver_at`]) that is not yet
    /// due, in your transaction: `true` when it was waiting and is gone, so it
    /// will never be delivered; `false` when no such event waits (unknown id,
    /// already cancelled, or already due and in the outbox, past cancelling).
    pub async fn cancel(
        &self,
        conn: &mut PgConnection,
        event_id: Uuid,
    ) -> Result<bool, EnqueueError> {
        let gone: Option<i64> = sqlx::query_scalar(&self.queries.outbox_scheduled_cancel)
            .persistent(self.statements.persistent())
            .bind(event_id)
            .fetch_optional(conn)
            .await
            .map_err(|e| EnqueueError::in_schema(e, &self.schema))?;
        Ok(gone.is_some())
    }

    /// How the insert is prepared on your connection: [`Statements::Unnamed`]
    /// behind a pooler in transaction mode (PgBouncer, RDS Proxy, a hosted
    /// database's pooled URL), else the default, [`Statements::Named`].
    pub fn statements(mut self, statements: Statements) -> Self {
        self.statements = statements;
        self
    }

    /// The schema.
    pub fn schema(&self) -> &SchemaName {
        &self.schema
    }

    /// Insert `event` on `conn` — pass `&mut *tx` so it joins your transaction:
    /// it is committed, or rolled back, with your business rows.
    pub async fn enqueue(
        &self,
        conn: &mut PgConnection,
        event: Event,
    ) -> Result<Enqueued, EnqueueError> {
        event.validate()?;
        let at = self.scheduled(&event)?;
        let sql = match at {
            Some(_) => &self.queries.outbox_schedule,
            None => &self.queries.outbox_insert,
        };
        let mut insert = sqlx::query_as(sql)
            .persistent(self.statements.persistent())
            .bind(event.event_id.unwrap_or_else(Uuid::now_v7))
            .bind(&event.topic)
            .bind(&event.event)
            .bind(&event.key)
            .bind(&event.payload)
            .bind(&event.headers);
        if let Some(at) = at {
            insert = insert.bind(at);
        }
        let (id, event_id): (i64, Uuid) = insert
            .fetch_one(conn)
            .await
            .map_err(|e| EnqueueError::in_schema(e, &self.schema))?;
        Ok(Enqueued { id, event_id })
    }

    /// Insert several events in one statement, in the given order. A batch
    /// with scheduled events ([`Event::deliver_at`]) is written one
    /// statement an event, and its result is in the batch's order.
    pub async fn enqueue_many(
        &self,
        conn: &mut PgConnection,
        events: Vec<Event>,
    ) -> Result<Vec<Enqueued>, EnqueueError> {
        if events.is_empty() {
            return Ok(Vec::new());
        }
        let count = events.len();
        for (index, e) in events.iter().enumerate() {
            e.validate()
                .map_err(|source| EnqueueError::InvalidEventInBatch {
                    index,
                    count,
                    topic: e.topic.clone(),
                    source,
                })?;
        }
        let mut scheduled = false;
        for (index, e) in events.iter().enumerate() {
            scheduled |= self
                .scheduled(e)
                .map_err(|source| EnqueueError::InvalidEventInBatch {
                    index,
                    count,
                    topic: e.topic.clone(),
                    source,
                })?
                .is_some();
        }
        if scheduled {
            let mut out = Vec::with_capacity(count);
            for e in events {
                out.push(self.enqueue(&mut *conn, e).await?);
            }
            return Ok(out);
        }
        let n = events.len();
        let (mut ids, mut topics, mut types, mut keys, mut payloads, mut headers) = (
            Vec::with_capacity(n),
            Vec::with_capacity(n),
            Vec::with_capacity(n),
            Vec::with_capacity(n),
            Vec::with_capacity(n),
            Vec::with_capacity(n),
        );
        for e in events {
            ids.push(e.event_id.unwrap_or_else(Uuid::now_v7));
            topics.push(e.topic);
            types.push(e.event);
            keys.push(e.key);
            payloads.push(e.payload);
            headers.push(e.headers);
        }
        let rows: Vec<(i64, Uuid)> = sqlx::query_as(&self.queries.outbox_insert_many)
            .persistent(self.statements.persistent())
            .bind(ids)
            .bind(topics)
            .bind(types)
            .bind(keys)
            .bind(payloads)
            .bind(headers)
            .fetch_all(conn)
            .await
            .map_err(|e| EnqueueError::in_schema(e, &self.schema))?;
        let mut out: Vec<Enqueued> = rows
            .into_iter()
            .map(|(id, event_id)| Enqueued { id, event_id })
            .collect();
        out.sort_by_key(|e| e.id);
        Ok(out)
    }
}

fn default_outbox() -> &'static Outbox {
    static OUTBOX: OnceLock<Outbox> = OnceLock::new();
    OUTBOX.get_or_init(|| Outbox::new(DEFAULT_SCHEMA).expect("default schema name is valid"))
}

/// [`Outbox::enqueue`] on the default schema ([`DEFAULT_SCHEMA`]).
pub async fn enqueue(conn: &mut PgConnection, event: Event) -> Result<Enqueued, EnqueueError> {
    default_outbox().enqueue(conn, event).await
}

/// [`Outbox::enqueue_many`] on the default schema ([`DEFAULT_SCHEMA`]).
pub async fn enqueue_many(
    conn: &mut PgConnection,
    events: Vec<Event>,
) -> Result<Vec<Enqueued>, EnqueueError> {
    default_outbox().enqueue_many(conn, events).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_malformed_traceparent_is_refused_before_the_database() {
        let ok = Event::new("t", "e", json!({}))
            .traceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01");
        assert!(ok.validate().is_ok());
        let err = Event::new("t", "e", json!({}))
            .traceparent("not-a-trace")
            .validate()
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("traceparent \"not-a-trace\" is not a W3C trace context"),
            "{err}"
        );
        let mut e = Event::new("t", "e", json!({}));
        e.headers = json!({"traceparent": 7});
        let err = e.validate().unwrap_err().to_string();
        assert!(err.contains("must be a string"), "{err}");
    }
}
