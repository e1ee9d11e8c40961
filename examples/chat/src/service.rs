//! One chat service: HTTP API and page, socket.io rooms, the inbox worker for
//! messages and receipts from the peer, and (optionally) its own relay.

pub use crate::broker::{Broker, BrokerArgs};
use crate::model::{self, Message, MessageCreated, MAX_BODY_CHARS};
use crate::Error;
use axum::extract::rejection::JsonRejection;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{Html, IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use postbox::{Event, Outbox, SchemaName};
use serde::Deserialize;
use socketioxide::extract::{AckSender, Data, SocketRef};
use socketioxide::SocketIo;
use sqlx::{PgConnection, PgPool};
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

/// Which version of the seed's system to run.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// The naive dual write of the seed: INSERT, then `queue.add` through an
    /// in-memory retry buffer (like ioredis's offline queue); no inbox. Kept
    /// to show, in the chaos harness, what postbox fixes.
    V1,
    /// postbox: outbox in the message's transaction, relay, inbox.
    V2,
}

#[derive(clap::Args, Clone)]
pub struct Args {
    /// This service's name, shown on its page (`consumers` or `workers`).
    #[arg(long)]
    pub service: String,
    /// The other service's name.
    #[arg(long)]
    pub peer: String,
    /// Schema of this service [default: the service name].
    #[arg(long)]
    pub schema: Option<String>,
    /// Schema of the peer, which names the queue it consumes [default: the peer name].
    #[arg(long)]
    pub peer_schema: Option<String>,
    /// PostgreSQL URL, as this service's own role.
    #[arg(long, env = "DATABASE_URL", hide_env_values = true)]
    pub database_url: String,
    #[command(flatten)]
    pub broker: BrokerArgs,
    /// Address of the HTTP server.
    #[arg(long, default_value = "127.0.0.1:8081")]
    pub listen: String,
    /// Run the relay inside this process instead of a separate `postbox relay`.
    #[arg(long)]
    pub embedded_relay: bool,
    /// How soon a message a crashed consumer held is redelivered (ms): BullMQ's
    /// job lock duration, JetStream's ack wait (RabbitMQ redelivers as soon as
    /// the connection closes).
    #[arg(long, default_value_t = 30_000)]
    pub lock_duration_ms: u64,
    /// v2 (postbox) or v1 (the seed's naive dual write, for comparison).
    #[arg(long, value_enum, default_value = "v2")]
    pub mode: Mode,
    /// How this service prepares its statements: `unnamed` when the database
    /// URL goes through a connection pooler in transaction mode (PgBouncer,
    /// a hosted database's pooled URL), `named` (kept per session) otherwise.
    #[arg(long, value_enum, default_value = "named")]
    pub statements: Statements,
}

/// [`postbox::Statements`], as a command-line value.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Statements {
    Named,
    Unnamed,
}

impl From<Statements> for postbox::Statements {
    fn from(s: Statements) -> Self {
        match s {
            Statements::Named => postbox::Statements::Named,
            Statements::Unnamed => postbox::Statements::Unnamed,
        }
    }
}

pub struct Svc {
    pub(crate) service: String,
    pub(crate) peer: String,
    pub(crate) mode: Mode,
    /// v1 only: the in-memory buffer of events not yet in Redis.
    pub(crate) v1_buffer: Option<tokio::sync::mpsc::UnboundedSender<MessageCreated>>,
    /// Test hook: exit right after the inbox commit of this message body.
    pub(crate) crash_after_inbox: Option<String>,
    pub(crate) peer_topic: String,
    pub(crate) pool: PgPool,
    /// How every statement of this service is prepared (`--statements`).
    pub(crate) statements: postbox::Statements,
    pub(crate) outbox: Outbox,
    pub(crate) io: SocketIo,
    pub(crate) q_list: String,
    pub(crate) q_exists: String,
    pub(crate) q_insert: String,
    pub(crate) q_history: String,
    pub(crate) q_received: String,
    pub(crate) q_received_naive: String,
    pub(crate) q_delivered: String,
}

impl Svc {
    /// Push a message from the peer to the browsers in its chat room.
    pub(crate) async fn show_received(&self, m: MessageCreated) -> Message {
        let msg = Message {
            id: m.id,
            chat_id: m.chat_id,
            body: m.body,
            sender: m.sender,
            mine: false,
            created_at: m.created_at,
            state: "received".into(),
        };
        let _ = self
            .io
            .to(format!("chat:{}", msg.chat_id))
            .emit("message", &msg)
            .await;
        self.shown(&format!(
            "shown {:?} in chat {} (from {})",
            msg.body, msg.chat_id, msg.sender
        ));
        msg
    }

    pub(crate) fn shown(&self, what: &str) {
        // The demo's timeline reads these lines.
        println!("{}: {what}", self.service);
    }
}

pub async fn run(a: Args) -> Result<(), Error> {
    if a.mode == Mode::V1 && a.broker.broker != Broker::Bullmq {
        return Err("--mode v1 (the naive dual write) runs over BullMQ only: drop --broker".into());
    }
    let schema = SchemaName::new(a.schema.as_deref().unwrap_or(&a.service))?;
    let peer_schema = SchemaName::new(a.peer_schema.as_deref().unwrap_or(&a.peer))?;
    // One server, or a primary and its standbys (a libpq-style host list
    // with target_session_attrs=read-write): the pool follows the primary.
    let servers = Arc::new(a.database_url.parse::<postbox::Servers>()?);
    let pool = servers.pool(sqlx::postgres::PgPoolOptions::new().max_connections(10));
    let mut c = pool.acquire().await.map_err(|e| {
        format!(
            "cannot connect to PostgreSQL at {}: {e}",
            postbox_relay::Secret::new(a.database_url.clone())
        )
    })?;
    postbox::migrate::ensure_migrated(&mut c, &schema).await?;
    drop(c);

    let (layer, io) = SocketIo::new_layer();
    io.ns("/", async |s: SocketRef| {
        s.on(
            "join",
            // Acknowledged once joined: the page loads the chat's history
            // only then, so no message emitted to the room falls between.
            async |s: SocketRef, Data(d): Data<serde_json::Value>, ack: AckSender| {
                if let Some(id) = d["chat_id"].as_i64() {
                    s.join(format!("chat:{id}"));
                }
                let _ = ack.send(&true);
            },
        );
        s.on(
            "leave",
            async |s: SocketRef, Data(d): Data<serde_json::Value>| {
                if let Some(id) = d["chat_id"].as_i64() {
                    s.leave(format!("chat:{id}"));
                }
            },
        );
    });

    let r = |t: &str| postbox::sql::render(t, &schema);
    let (v1_tx, v1_rx) = tokio::sync::mpsc::unbounded_channel();
    let svc = Arc::new(Svc {
        service: a.service.clone(),
        peer: a.peer.clone(),
        mode: a.mode,
        v1_buffer: (a.mode == Mode::V1).then_some(v1_tx),
        crash_after_inbox: std::env::var("CHAT_FAILPOINT")
            .ok()
            .and_then(|f| f.strip_prefix("crash_after_inbox:").map(str::to_owned)),
        peer_topic: model::queue_for(peer_schema.as_str()),
        statements: a.statements.into(),
        outbox: Outbox::new(schema.as_str())?.statements(a.statements.into()),
        io: io.clone(),
        q_list: r(include_str!("../sql/chat_list.sql")),
        q_exists: r(include_str!("../sql/chat_exists.sql")),
        q_insert: r(include_str!("../sql/message_insert.sql")),
        q_history: r(include_str!("../sql/message_history.sql")),
        q_received: r(include_str!("../sql/received_insert.sql")),
        q_received_naive: r(include_str!("../sql/received_insert_naive.sql")),
        q_delivered: r(include_str!("../sql/message_mark_delivered.sql")),
        pool: pool.clone(),
    });

    let shutdown = CancellationToken::new();
    let follow = tokio::spawn({
        let (servers, pool, stop) = (servers.clone(), pool.clone(), shutdown.clone());
        async move {
            servers
                .follow_primary(
                    &pool,
                    std::time::Duration::from_millis(500),
                    stop.cancelled_owned(),
                )
                .await
        }
    });
    let consumer = tokio::spawn(crate::consume::run(
        svc.clone(),
        a.clone(),
        schema.clone(),
        shutdown.clone(),
    ));
    if a.mode == Mode::V1 {
        tokio::spawn(crate::naive::v1_sender(
            svc.clone(),
            a.broker.redis_url.clone(),
            v1_rx,
        ));
    }

    let relay = if a.embedded_relay && a.mode == Mode::V2 {
        let sink = a.broker.relay_sink()?;
        let relay = postbox_relay::Relay::new(
            postbox_relay::Config {
                database_url: postbox_relay::Secret::new(a.database_url.clone()),
                schemas: vec![schema.to_string()],
                workers: 1,
                ..Default::default()
            },
            sink,
        )?;
        Some(tokio::spawn(relay.run(shutdown.clone())))
    } else {
        None
    };

    let app = Router::new()
        .route(
            "/",
            get(async || Html(include_str!("../static/index.html"))),
        )
        .route("/healthz", get(async || "ok"))
        .route("/api/info", get(info))
        .route("/api/chats", get(chats))
        .route("/api/chats/{id}/messages", get(history).post(send))
        .with_state(svc.clone())
        .layer(layer);
    let listener = tokio::net::TcpListener::bind(&a.listen)
        .await
        .map_err(|e| format!("cannot listen on {}: {e}", a.listen))?;
    println!(
        "{}: listening on http://{}",
        a.service,
        listener.local_addr()?
    );
    let stop = shutdown.clone();
    tokio::spawn(async move {
        use tokio::signal::unix::{signal, SignalKind};
        let mut term = signal(SignalKind::terminate()).expect("SIGTERM");
        let mut int = signal(SignalKind::interrupt()).expect("SIGINT");
        tokio::select! { _ = term.recv() => {}, _ = int.recv() => {} }
        stop.cancel();
    });
    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown.clone().cancelled_owned())
        .await?;
    // A deploy: the job in hand finishes (or, if cut off, is redelivered after its lock expires).
    consumer.await?;
    follow.await?;
    if let Some(relay) = relay {
        relay.await??;
    }
    println!("{}: stopped", a.service);
    Ok(())
}

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

async fn info(State(s): State<Arc<Svc>>) -> Json<serde_json::Value> {
    Json(
        serde_json::json!({ "service": s.service, "peer": s.peer, "max_body_chars": MAX_BODY_CHARS }),
    )
}

async fn chats(State(s): State<Arc<Svc>>) -> Result<Json<serde_json::Value>, ApiError> {
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

async fn history(
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
struct SendBody {
    body: String,
}

async fn send(
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
