//! One chat service: its page and HTTP API (`api.rs`), socket.io rooms, the
//! inbox worker for messages and receipts from the peer, and (optionally) its
//! own relay.

use crate::api;
pub use crate::broker::{Broker, BrokerArgs};
use crate::model::{self, Message, MessageCreated};
use crate::Error;
use axum::response::Html;
use axum::routing::get;
use axum::Router;
use postbox::{Outbox, SchemaName};
use socketioxide::extract::{AckSender, Data, SocketRef};
use socketioxide::SocketIo;
use sqlx::PgPool;
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
        .route("/api/info", get(api::info))
        .route("/api/chats", get(api::chats))
        .route(
            "/api/chats/{id}/messages",
            get(api::history).post(api::send),
        )
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
