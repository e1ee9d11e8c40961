//! Where a lost message got stuck, for a verdict that found some: its outbox
//! row, its BullMQ job, the receiver's inbox and table.

use crate::history::Msg;
use crate::world::World;
use std::collections::HashMap;

impl World {
    /// Where each of `lost` got stuck: its outbox row, its BullMQ job, the
    /// receiver's inbox and table (call before [`World::finish`]).
    pub async fn explain(&self, lost: &[Msg]) -> String {
        let mut out = String::new();
        let redis = redis::Client::open(self.redis.url());
        let mut conn = match redis {
            Ok(c) => c.get_multiplexed_async_connection().await.ok(),
            Err(_) => None,
        };
        let (cs, ws) = (&self.consumers.schema, &self.workers.schema);
        let queue = format!("bull:chat-to-{ws}");
        for m in lost {
            let row: Option<(uuid::Uuid, Option<String>, i32, Option<String>)> =
                sqlx::query_as(&format!(
                    "SELECT event_id, sent_at::text, attempts, last_error FROM {cs}.outbox
                      WHERE payload->>'body' = $1 AND (payload->>'chat_id')::bigint = $2"
                ))
                .bind(m.body())
                .bind(m.chat)
                .fetch_optional(&self.admin)
                .await
                .unwrap_or_default();
            let Some((event_id, sent_at, attempts, last_error)) = row else {
                out.push_str(&format!("  {m}: no outbox row\n"));
                continue;
            };
            let inbox: i64 = sqlx::query_scalar(&format!(
                "SELECT count(*) FROM {ws}.inbox WHERE message_id = $1"
            ))
            .bind(event_id.to_string())
            .fetch_one(&self.admin)
            .await
            .unwrap_or(-1);
            let received: i64 = sqlx::query_scalar(&format!(
                "SELECT count(*) FROM {ws}.received WHERE message_id = $1"
            ))
            .bind(event_id)
            .fetch_one(&self.admin)
            .await
            .unwrap_or(-1);
            let mut job = String::from("?");
            if let Some(c) = conn.as_mut() {
                let fields: HashMap<String, String> = redis::cmd("HGETALL")
                    .arg(format!("{queue}:{event_id}"))
                    .query_async(c)
                    .await
                    .unwrap_or_default();
                let mut sets = Vec::new();
                for set in ["wait", "active", "paused", "prioritized"] {
                    let pos: Option<i64> = redis::cmd("LPOS")
                        .arg(format!("{queue}:{set}"))
                        .arg(event_id.to_string())
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
                        .arg(event_id.to_string())
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
                    .map(|(k, v)| format!("{k}={v}"))
                    .collect();
                keys.sort();
                job = format!("in {sets:?}, {}", keys.join(" "));
            }
            out.push_str(&format!(
                "  {m}: event {event_id}, outbox sent_at {sent_at:?} attempts {attempts} last_error {last_error:?}; \
                 job {job}; workers inbox {inbox}, received {received}\n"
            ));
        }
        out
    }
}
