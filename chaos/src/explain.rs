//! Where a message went wrong, for a verdict that found some: for a lost one
//! where it got stuck, for one shown out of order when each hop handled it
//! (outbox row written and sent, BullMQ job added, taken and finished, inbox
//! row), on the history's clock.

use crate::history::{Msg, Verdict};
use crate::world::World;
use redis::aio::MultiplexedConnection;
use std::collections::HashMap;
use std::fmt::Write;

/// At most this many messages are explained around one reordering.
const AROUND: u32 = 40;

impl World {
    /// What became of the verdict's lost and reordered messages (call before
    /// [`World::finish`]); empty if there are none.
    pub async fn explain(&self, v: &Verdict) -> String {
        if v.lost.is_empty() && v.reordered.is_empty() {
            return String::new();
        }
        let mut conn = match redis::Client::open(self.redis.url()) {
            Ok(c) => c.get_multiplexed_async_connection().await.ok(),
            Err(_) => None,
        };
        let mut out = String::new();
        if !v.lost.is_empty() {
            out.push_str("where the lost messages are:\n");
        }
        for m in &v.lost {
            out.push_str(&self.explain_one(*m, conn.as_mut()).await);
        }
        for r in &v.reordered {
            let _ = writeln!(
                out,
                "{} first shown after {} (times in s on the timeline's clock):",
                r.first,
                Msg {
                    chat: r.first.chat,
                    n: r.after
                }
            );
            for m in r.around(AROUND) {
                out.push_str(&self.explain_one(m, conn.as_mut()).await);
            }
        }
        out
    }

    /// One line: the message's outbox row, its BullMQ job, the receiver's rows.
    async fn explain_one(&self, m: Msg, conn: Option<&mut MultiplexedConnection>) -> String {
        let (cs, ws) = (&self.consumers.schema, &self.workers.schema);
        type Row = (uuid::Uuid, i64, f64, Option<f64>, i32, Option<String>);
        let row: Option<Row> = sqlx::query_as(&format!(
            "SELECT event_id, id, extract(epoch FROM created_at)::float8 * 1000,
                    extract(epoch FROM sent_at)::float8 * 1000, attempts, last_error
               FROM {cs}.outbox
              WHERE payload->>'body' = $1 AND (payload->>'chat_id')::bigint = $2"
        ))
        .bind(m.body())
        .bind(m.chat)
        .fetch_optional(&self.admin)
        .await
        .unwrap_or_default();
        let Some((event_id, id, created, sent, attempts, last_error)) = row else {
            return format!("  {m}: no outbox row\n");
        };
        let at = |ms: f64| format!("{:.2}", self.history.at_epoch_ms(ms));
        let inbox: Option<f64> = sqlx::query_scalar(&format!(
            "SELECT extract(epoch FROM received_at)::float8 * 1000 FROM {ws}.inbox
              WHERE message_id = $1"
        ))
        .bind(event_id.to_string())
        .fetch_optional(&self.admin)
        .await
        .unwrap_or_default();
        let received: i64 = sqlx::query_scalar(&format!(
            "SELECT count(*) FROM {ws}.received WHERE message_id = $1"
        ))
        .bind(event_id)
        .fetch_one(&self.admin)
        .await
        .unwrap_or(-1);
        let job = match conn {
            Some(c) => self.job(c, &event_id.to_string()).await,
            None => "?".to_owned(),
        };
        format!(
            "  {m}: outbox id {id} written {} sent {} attempts {attempts} last_error {last_error:?}; \
             job {job}; workers inbox {}, received {received}\n",
            at(created),
            sent.map_or("never".to_owned(), at),
            inbox.map_or("none".to_owned(), at),
        )
    }

    /// Where the job is and its fields (times on the history's clock).
    async fn job(&self, c: &mut MultiplexedConnection, id: &str) -> String {
        let queue = format!("bull:chat-to-{}", self.workers.schema);
        let fields: HashMap<String, String> = redis::cmd("HGETALL")
            .arg(format!("{queue}:{id}"))
            .query_async(c)
            .await
            .unwrap_or_default();
        let mut sets = Vec::new();
        for set in ["wait", "active", "paused"] {
            let pos: Option<i64> = redis::cmd("LPOS")
                .arg(format!("{queue}:{set}"))
                .arg(id)
                .query_async(c)
                .await
                .unwrap_or_default();
            if pos.is_some() {
                sets.push(set);
            }
        }
        for set in ["completed", "failed", "delayed", "prioritized"] {
            let score: Option<f64> = redis::cmd("ZSCORE")
                .arg(format!("{queue}:{set}"))
                .arg(id)
                .query_async(c)
                .await
                .unwrap_or_default();
            if score.is_some() {
                sets.push(set);
            }
        }
        let mut keys: Vec<_> = fields
            .iter()
            .filter(|(k, _)| !matches!(k.as_str(), "data" | "opts" | "name"))
            .map(|(k, v)| match (k.as_str(), v.parse::<f64>()) {
                ("timestamp" | "processedOn" | "finishedOn", Ok(ms)) => {
                    format!("{k}={:.2}", self.history.at_epoch_ms(ms))
                }
                _ => format!("{k}={v}"),
            })
            .collect();
        keys.sort();
        format!("in {sets:?}, {}", keys.join(" "))
    }
}
