//! The chat's HTTP API: its chats, a chat's history, and sending a message
//! (the message and its event in one transaction); errors as JSON.

use crate::model::{self, Message, MessageCreated, MAX_BODY_CHARS};
use crate::service::{Mode, Svc};
use axum::extract::rejection::JsonRejection;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use postbox::Event;
use serde::Deserialize;
use sqlx::PgConnection;
use std::sync::Arc;

/// An API error: status plus `{"error": "..."}`.
pub(crate) struct ApiError(pub(crate) StatusCode, pub(crate) String);

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.0, Json(serde_json::json!({ "error": self.1 }))).into_response()
    }
}

impl From<sqlx::Error> for ApiError {
    fn from(e: sqlx::Error) -> Self {
        tracing::error!(error = %e, "database error");
        ApiError(
            StatusCode::SERVICE_UNAVAILABLE,
            "database unavailable, try again".into(),
        )
    }
}

impl From<postbox::EnqueueError> for ApiError {
    fn from(e: postbox::EnqueueError) -> Self {
        match e {
            postbox::EnqueueError::InvalidEvent(e) => {
                ApiError(StatusCode::BAD_REQUEST, format!("invalid message: {e}"))
            }
            e if e.is_transient() => {
                tracing::warn!(error = %e, "outbox unavailable");
                ApiError(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "could not store the message, try again".into(),
                )
            }
            e => {
                tracing::error!(error = %e, "outbox error");
                ApiError(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "could not store the message".into(),
                )
            }
        }
    }
}

pub(crate) async fn info(State(s): State<Arc<Svc>>) -> Json<serde_json::Value> {
    Json(
        serde_json::json!({ "service": s.service, "peer": s.peer, "max_body_chars": MAX_BODY_CHARS }),
    )
}

pub(crate) async fn chats(State(s): State<Arc<Svc>>) -> Result<Json<serde_json::Value>, ApiError> {
    // Reads run in a transaction too: behind a transaction pooler, an
    // unnamed statement's parse and execute must reach the same session.
    let mut tx = s.pool.begin().await?;
    let rows: Vec<(i64, String)> = sqlx::query_as(&s.q_list)
        .persistent(s.statements.persistent())
        .fetch_all(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(Json(
        rows.into_iter()
            .map(|(id, title)| serde_json::json!({ "id": id, "title": title }))
            .collect(),
    ))
}

pub(crate) async fn chat_exists(s: &Svc, conn: &mut PgConnection, id: i64) -> Result<(), ApiError> {
    let exists: bool = sqlx::query_scalar(&s.q_exists)
        .persistent(s.statements.persistent())
        .bind(id)
        .fetch_one(conn)
        .await?;
    if exists {
        Ok(())
    } else {
        Err(ApiError(
            StatusCode::NOT_FOUND,
            format!("chat {id} does not exist"),
        ))
    }
}

pub(crate) async fn history(
    State(s): State<Arc<Svc>>,
    Path(id): Path<i64>,
) -> Result<Json<Vec<Message>>, ApiError> {
    let mut tx = s.pool.begin().await?;
    chat_exists(&s, &mut tx, id).await?;
    let rows: Vec<Message> = sqlx::query_as(&s.q_history)
        .persistent(s.statements.persistent())
        .bind(id)
        .bind(&s.service)
        .fetch_all(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(Json(rows))
}

#[derive(Deserialize)]
pub(crate) struct SendBody {
    body: String,
}

pub(crate) async fn send(
    State(s): State<Arc<Svc>>,
    Path(id): Path<i64>,
    payload: Result<Json<SendBody>, JsonRejection>,
) -> Result<(StatusCode, Json<Message>), ApiError> {
    let Json(SendBody { body }) = payload.map_err(|e| {
        ApiError(
            StatusCode::BAD_REQUEST,
            format!(
                "expected a JSON object {{\"body\": \"...\"}}: {}",
                e.body_text()
            ),
        )
    })?;
    let body = body.trim().to_owned();
    if body.is_empty() {
        return Err(ApiError(
            StatusCode::UNPROCESSABLE_ENTITY,
            "message body is empty".into(),
        ));
    }
    let chars = body.chars().count();
    if chars > MAX_BODY_CHARS {
        return Err(ApiError(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("message body is {chars} characters; the limit is {MAX_BODY_CHARS}"),
        ));
    }
    if s.mode == Mode::V1 {
        return crate::naive::send_naive(&s, id, body).await;
    }
    // The message and its event: one transaction, both or neither.
    let mut tx = s.pool.begin().await?;
    chat_exists(&s, &mut tx, id).await?;
    let (mid, chat_id, body, created_at, _delivered): Stored = sqlx::query_as(&s.q_insert)
        .persistent(s.statements.persistent())
        .bind(id)
        .bind(&body)
        .fetch_one(&mut *tx)
        .await?;
    let event = MessageCreated {
        id: mid,
        chat_id,
        body: body.clone(),
        sender: s.service.clone(),
        created_at,
    };
    s.outbox
        .enqueue(
            &mut tx,
            Event::new(
                &s.peer_topic,
                model::CREATED,
                serde_json::to_value(&event).expect("serialisable"),
            )
            .key(format!("chat:{chat_id}"))
            .event_id(mid),
        )
        .await?;
    tx.commit().await?;
    let msg = Message {
        id: mid,
        chat_id,
        body,
        sender: s.service.clone(),
        mine: true,
        created_at,
        state: "saved".into(),
    };
    // Other tabs of this service show it too.
    let _ =
        s.io.to(format!("chat:{chat_id}"))
            .emit("message", &msg)
            .await;
    s.shown(&format!("saved {:?} in chat {chat_id}", msg.body));
    Ok((StatusCode::CREATED, Json(msg)))
}

pub(crate) type Stored = (
    uuid::Uuid,
    i64,
    String,
    chrono::DateTime<chrono::Utc>,
    Option<chrono::DateTime<chrono::Utc>>,
);
