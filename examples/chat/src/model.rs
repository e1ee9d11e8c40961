//! What travels between the services and to the browsers.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// Longest message body, in characters.
pub const MAX_BODY_CHARS: usize = 2000;

/// A message as the API and the page show it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, sqlx::FromRow)]
pub struct Message {
    pub id: Uuid,
    pub chat_id: i64,
    pub body: String,
    /// The service that wrote it.
    #[sqlx(rename = "sender")]
    #[serde(rename = "from")]
    pub sender: String,
    /// Sent by the service showing it.
    pub mine: bool,
    pub created_at: DateTime<Utc>,
    /// `saved` → `delivered` for mine, `received` for the peer's.
    pub state: String,
}

/// `message.created`: a message for the peer (job data; the job id is `id`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct MessageCreated {
    pub id: Uuid,
    pub chat_id: i64,
    pub body: String,
    pub sender: String,
    pub created_at: DateTime<Utc>,
}

/// `message.received`: the peer's receipt, so the sender can show "delivered".
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct MessageReceived {
    pub id: Uuid,
    pub chat_id: i64,
}

/// Event names (BullMQ job names).
pub const CREATED: &str = "message.created";
pub const RECEIVED: &str = "message.received";

/// The BullMQ queue a service consumes.
pub fn queue_for(schema: &str) -> String {
    format!("chat-to-{schema}")
}
