//! A raw Redis view of one BullMQ queue, independent of the bullmq crate.

use redis::AsyncCommands;

/// The queue's keys, read with plain Redis commands.
#[derive(Clone)]
pub struct RedisView {
    conn: redis::aio::MultiplexedConnection,
    queue: String,
}

impl RedisView {
    pub async fn new(url: &str, queue: &str) -> RedisView {
        let client = redis::Client::open(url).unwrap();
        RedisView {
            conn: client.get_multiplexed_async_connection().await.unwrap(),
            queue: queue.to_owned(),
        }
    }

    /// Job ids in the order they were added to the wait list (LPUSH, so reversed).
    pub async fn waiting_ids(&self) -> Vec<String> {
        let mut ids: Vec<String> = self
            .conn
            .clone()
            .lrange(format!("bull:{}:wait", self.queue), 0, -1)
            .await
            .unwrap();
        ids.reverse();
        ids
    }

    /// A job's data, parsed.
    pub async fn data(&self, id: &str) -> serde_json::Value {
        let s: String = self
            .conn
            .clone()
            .hget(format!("bull:{}:{id}", self.queue), "data")
            .await
            .unwrap();
        serde_json::from_str(&s).unwrap()
    }

    /// A job's name.
    pub async fn name(&self, id: &str) -> String {
        self.conn
            .clone()
            .hget(format!("bull:{}:{id}", self.queue), "name")
            .await
            .unwrap()
    }

    /// The events of the waiting jobs, in add order: (job id, key, seq).
    pub async fn waiting(&self) -> Vec<(String, String, u64)> {
        let mut out = Vec::new();
        for id in self.waiting_ids().await {
            let d = self.data(&id).await;
            out.push((
                id,
                d["key"].as_str().unwrap().to_owned(),
                d["seq"].as_u64().unwrap(),
            ));
        }
        out
    }

    pub async fn wait_len(&self) -> usize {
        let n: usize = self
            .conn
            .clone()
            .llen(format!("bull:{}:wait", self.queue))
            .await
            .unwrap();
        n
    }
}
