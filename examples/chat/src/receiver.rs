//! The inbox handler of a chat service: records a peer's message and sends
//! the receipt back in the same transaction, then shows it.

use crate::model::{self, MessageCreated, MessageReceived};
use crate::service::Svc;
use postbox::Event;
use sqlx::PgConnection;
use std::sync::Arc;

/// Handles the peer's messages inside the inbox transaction, whichever
/// broker brought them.
#[derive(Clone)]
pub struct Receiver(pub Arc<Svc>);

impl postbox::Handler for Receiver {
    async fn handle(
        &self,
        tx: &mut PgConnection,
        job: &postbox::Message,
    ) -> Result<(), postbox::BoxError> {
        let s = &self.0;
        match job.event() {
            model::CREATED => {
                let m: MessageCreated = job.json()?;
                sqlx::query(&s.q_received)
                    .persistent(s.statements.persistent())
                    .bind(m.id)
                    .bind(m.chat_id)
                    .bind(&m.body)
                    .bind(&m.sender)
                    .bind(m.created_at)
                    .execute(&mut *tx)
                    .await?;
                // The receipt leaves in the same transaction as the record.
                let receipt = MessageReceived {
                    id: m.id,
                    chat_id: m.chat_id,
                };
                s.outbox
                    .enqueue(
                        tx,
                        Event::new(
                            &s.peer_topic,
                            model::RECEIVED,
                            serde_json::to_value(&receipt)?,
                        )
                        .key(format!("chat:{}", m.chat_id)),
                    )
                    .await?;
            }
            model::RECEIVED => {
                let r: MessageReceived = job.json()?;
                sqlx::query(&s.q_delivered)
                    .persistent(s.statements.persistent())
                    .bind(r.id)
                    .fetch_optional(&mut *tx)
                    .await?;
            }
            other => return Err(format!("unknown event {other:?}").into()),
        }
        Ok(())
    }

    async fn after_commit(&self, job: &postbox::Message) {
        let s = &self.0;
        match job.event() {
            model::CREATED => {
                if let Ok(m) = job.json::<MessageCreated>() {
                    let msg = s.show_received(m).await;
                    if s.crash_after_inbox.as_deref() == Some(msg.body.as_str()) {
                        // Committed in the inbox, not acknowledged: the broker redelivers
                        // it (BullMQ once its lock expires, RabbitMQ when the
                        // connection closes, JetStream after ack_wait), and
                        // the inbox must skip it.
                        s.shown(&format!("crashed after recording {:?}", msg.body));
                        std::process::exit(101);
                    }
                }
            }
            model::RECEIVED => {
                if let Ok(r) = job.json::<MessageReceived>() {
                    let status = serde_json::json!({ "id": r.id, "chat_id": r.chat_id, "state": "delivered" });
                    let _ =
                        s.io.to(format!("chat:{}", r.chat_id))
                            .emit("status", &status)
                            .await;
                }
            }
            _ => {}
        }
    }

    async fn on_duplicate(&self, job: &postbox::Message) {
        if job.event() == model::CREATED {
            let data: serde_json::Value = job.json().unwrap_or_default();
            let body = data["body"].as_str().unwrap_or_default().to_owned();
            self.0
                .shown(&format!("{body:?} again, already in inbox, skipped"));
        }
    }
}
