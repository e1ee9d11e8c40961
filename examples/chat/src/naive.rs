//! v1, the seed's naive dual write, kept to show in the chaos harness what
//! postbox fixes: INSERT and commit, then hand the event to an in-memory
//! buffer that BullMQ drains; no inbox.

use crate::api::{ApiError, Stored};
use crate::model::{self, Message, MessageCreated};
use crate::service::Svc;
use axum::http::StatusCode;
use axum::Json;
use postbox_bullmq::bullmq::options::RedisConnectionOptions;
use postbox_bullmq::bullmq::Job;
use std::sync::Arc;

/// v1: INSERT, commit, then hand the event to an in-memory buffer — the dual write.
pub(crate) async fn send_naive(
    s: &Svc,
    id: i64,
    body: String,
) -> Result<(StatusCode, Json<Message>), ApiError> {
    let mut conn = s.pool.acquire().await?;
    crate::api::chat_exists(s, &mut conn, id).await?;
    let (mid, chat_id, body, created_at, _): Stored = sqlx::query_as(&s.q_insert)
        .bind(id)
        .bind(&body)
        .fetch_one(&mut *conn)
        .await?;
    let event = MessageCreated {
        id: mid,
        chat_id,
        body: body.clone(),
        sender: s.service.clone(),
        created_at,
    };
    if let Some(buffer) = &s.v1_buffer {
        let _ = buffer.send(event);
    }
    s.shown(&format!("saved {body:?} in chat {chat_id}"));
    Ok((
        StatusCode::CREATED,
        Json(Message {
            id: mid,
            chat_id,
            body,
            sender: s.service.clone(),
            mine: true,
            created_at,
            state: "saved".into(),
        }),
    ))
}

/// v1: like ioredis's offline queue, events wait in this process's memory
/// until Redis takes them. Whatever is here when the process stops is lost.
pub(crate) async fn v1_sender(
    s: Arc<Svc>,
    redis_url: String,
    mut rx: tokio::sync::mpsc::UnboundedReceiver<MessageCreated>,
) {
    use postbox_bullmq::bullmq::{Queue, QueueOptions};
    let mut queue: Option<Queue> = None;
    while let Some(event) = rx.recv().await {
        loop {
            if queue.is_none() {
                let opts = QueueOptions {
                    connection: RedisConnectionOptions {
                        url: redis_url.clone(),
                        ..Default::default()
                    },
                    ..Default::default()
                };
                queue = Queue::with_options(&s.peer_topic, opts).await.ok();
            }
            if let Some(q) = &queue {
                if q.add(model::CREATED, &event)
                    .job_id(event.id.to_string())
                    .await
                    .is_ok()
                {
                    break;
                }
            }
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        }
    }
}

/// v1: show what arrives; no inbox, no receipt.
pub(crate) async fn receive_naive(s: &Svc, job: &Job) -> Result<(), postbox_relay::BoxError> {
    let m: MessageCreated = serde_json::from_value(job.data().clone())?;
    sqlx::query(&s.q_received_naive)
        .bind(m.id)
        .bind(m.chat_id)
        .bind(&m.body)
        .bind(&m.sender)
        .bind(m.created_at)
        .execute(&s.pool)
        .await?;
    s.show_received(m).await;
    Ok(())
}
