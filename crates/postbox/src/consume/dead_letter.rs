//! The consumer side's dead letters: keeping a message its handler gave up
//! on, and running the ones an operator asked to replay.

use super::classify::AttemptError;
use super::{report, Handler, InboxConsumer};
use crate::{Message, Receipt};
use sqlx::types::Json;

/// A dead letter as a consumer takes it back for a replay.
#[derive(sqlx::FromRow)]
struct Claimed {
    id: i64,
    message_id: String,
    topic: String,
    /// The event type (the table's column is still `name`: see the
    /// consumer guide, "One name for the event type").
    name: Option<String>,
    key: Option<String>,
    payload: Vec<u8>,
    headers: Json<Vec<(String, String)>>,
    source: String,
}

impl Claimed {
    fn into_message(self) -> (i64, Message) {
        let msg = Message {
            id: self.message_id,
            topic: self.topic,
            event: self.name,
            key: self.key,
            payload: self.payload,
            headers: self.headers.0,
            source: self.source,
        };
        (self.id, msg)
    }
}

impl InboxConsumer {
    /// Keep `msg` as a dead letter after `attempts` failed runs, the first
    /// of them `failing_for` ago.
    pub(super) async fn record_dead_letter(
        &self,
        msg: &Message,
        attempts: u32,
        error: &str,
        failing_for: std::time::Duration,
    ) -> Result<(), sqlx::Error> {
        // In a transaction, as every statement of the library: behind a
        // transaction pooler, parse and execute then reach one session.
        let mut tx = self.pool.begin().await?;
        crate::sql::statement(&self.inbox.queries.inbox_dead_letter_record)
            .bind(&*self.name)
            .bind(&msg.id)
            .bind(&msg.topic)
            .bind(&msg.event)
            .bind(&msg.key)
            .bind(&msg.payload)
            .bind(Json(&msg.headers))
            .bind(&msg.source)
            .bind(i32::try_from(attempts).unwrap_or(i32::MAX))
            .bind(error)
            .bind(failing_for.as_secs_f64())
            .execute(&mut *tx)
            .await?;
        tx.commit().await
    }

    /// Run the oldest dead letter waiting for a replay, if any: its effect,
    /// inbox record and removal commit together. `Ok(false)`: none waits.
    pub(super) async fn replay_one<H: Handler>(&self, handler: &H) -> Result<bool, sqlx::Error> {
        let q = &self.inbox.queries;
        let mut tx = self.pool.begin().await?;
        let claimed: Option<Claimed> = crate::sql::statement_as(&q.inbox_dead_letter_claim)
            .bind(&*self.name)
            .fetch_optional(&mut *tx)
            .await?;
        let Some((id, msg)) = claimed.map(Claimed::into_message) else {
            return Ok(false);
        };
        let receipt = match self.inbox.receive(&mut tx, &self.name, &msg.id).await {
            Ok(r) => r,
            Err(crate::InboxError::Database(e)) => return Err(e),
            Err(e) => return Err(sqlx::Error::Protocol(e.to_string())),
        };
        let outcome = match receipt {
            Receipt::Duplicate => "already in the inbox; removed",
            Receipt::Fresh => match handler.handle(&mut tx, &msg).await {
                Ok(()) => "applied",
                Err(e) => {
                    let e = match AttemptError::from_handler(e) {
                        AttemptError::Database(db) => return Err(db),
                        AttemptError::Handler(h) => report::chain(&*h),
                    };
                    tx.rollback().await?;
                    let mut tx = self.pool.begin().await?;
                    crate::sql::statement(&q.inbox_dead_letter_failed_again)
                        .bind(id)
                        .bind(&e)
                        .execute(&mut *tx)
                        .await?;
                    tx.commit().await?;
                    metrics::counter!("postbox_inbox_replays_total", "consumer" => self.name.to_string(), "outcome" => "failed").increment(1);
                    report::replay_failed(&self.name, &msg, &e);
                    return Ok(true);
                }
            },
        };
        crate::sql::statement(&q.inbox_dead_letter_delete)
            .bind(id)
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        if receipt == Receipt::Fresh {
            handler.after_commit(&msg).await;
        }
        let label = if receipt == Receipt::Fresh {
            "applied"
        } else {
            "duplicate"
        };
        metrics::counter!("postbox_inbox_replays_total", "consumer" => self.name.to_string(), "outcome" => label).increment(1);
        report::replayed(&self.name, &msg, outcome);
        Ok(true)
    }
}
