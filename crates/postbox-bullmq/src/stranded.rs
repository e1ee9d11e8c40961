//! Jobs a worker fetched but never heard back about.
//!
//! BullMQ's `moveToActive` (and `moveToFinished`, which fetches the next job in
//! the same call) can run in Redis while its reply is lost: Redis killed after
//! the AOF write, the connection cut, the command timed out on a hung server.
//! The job then sits in the `active` list under a lock that its worker no
//! longer knows it holds. BullMQ hands it back only once the lock expires and
//! the stalled check has run twice, long after the jobs queued behind it were
//! processed. With one worker at concurrency 1 (how a BullMQ consumer keeps
//! order) the next job this worker gets would overtake it.
//!
//! So before a job it fetched, the inbox worker looks for such jobs ahead of it
//! and runs them through the inbox first, oldest first. When the stalled check
//! later returns them to the queue, the inbox completes them as duplicates.
//! A job that came with the previous job's completion (BullMQ fetches the next
//! job in the same call, under the same token) needs no look: its fetch is
//! the one whose reply arrived. Under a backlog jobs come that way, so the
//! look costs a round trip only when the worker fetched on its own.

use bullmq::{Job, Queue, QueueOptions, WorkerOptions};
use std::collections::HashSet;
use std::sync::Mutex;

/// One worker's view of the queue's `active` list.
pub(crate) struct Stranded {
    queue: Queue,
    /// Stranded jobs already run here, not yet back from the stalled check.
    ran: Mutex<HashSet<String>>,
    /// The lock token of the previous job.
    last_token: Mutex<Option<String>>,
}

impl Stranded {
    pub async fn new(queue: &str, opts: &WorkerOptions) -> Result<Self, bullmq::Error> {
        let q = QueueOptions {
            connection: opts.connection.clone(),
            prefix: opts.prefix.clone(),
            skip_version_check: true,
            ..Default::default()
        };
        Ok(Stranded {
            queue: Queue::with_options(queue, q).await?,
            ran: Mutex::new(HashSet::new()),
            last_token: Mutex::new(None),
        })
    }

    /// The jobs in `active` ahead of `job` that no live fetch of this worker
    /// holds, oldest first, leaving out those already run here (none when
    /// `job` came with the previous one's completion):
    /// - locked by this worker (its token's worker id) under another token;
    /// - not locked at all: the lock of whoever fetched it expired.
    ///
    /// A job of another live worker keeps its lock and is left alone.
    pub async fn ahead_of(&self, job: &Job) -> Result<Vec<Job>, bullmq::Error> {
        let Some(token) = job.token() else {
            return Ok(Vec::new());
        };
        {
            let mut last = self.last_token.lock().unwrap_or_else(|e| e.into_inner());
            let chained = last.as_deref() == Some(token);
            *last = Some(token.to_owned());
            if chained {
                return Ok(Vec::new());
            }
        }
        let worker = token.rsplit_once(':').map_or(token, |(w, _)| w);
        let keys = self.queue.keys();
        let mut conn = self.queue.connection().connection();
        // RPOPLPUSH puts each fetched job at the head: the tail is the oldest.
        let mut active: Vec<String> = redis::cmd("LRANGE")
            .arg(keys.active())
            .arg(0)
            .arg(-1)
            .query_async(&mut conn)
            .await?;
        active.reverse();
        let others: Vec<String> = {
            let mut ran = self.ran.lock().unwrap_or_else(|e| e.into_inner());
            ran.retain(|id| active.contains(id));
            active
                .into_iter()
                .filter(|id| id != job.id() && !ran.contains(id))
                .collect()
        };
        if others.is_empty() {
            return Ok(Vec::new());
        }
        let locks: Vec<Option<String>> = redis::cmd("MGET")
            .arg(
                others
                    .iter()
                    .map(|id| format!("{}:lock", keys.job_key(id)))
                    .collect::<Vec<_>>(),
            )
            .query_async(&mut conn)
            .await?;
        let mut stranded = Vec::new();
        for (id, lock) in others.iter().zip(locks) {
            let ours = match &lock {
                None => true,
                Some(l) => l != token && l.rsplit_once(':').is_some_and(|(w, _)| w == worker),
            };
            if ours {
                // Finished or removed meanwhile by its owner: nothing to run.
                match self.queue.get_job(id).await? {
                    Some(j) if j.finished_on().is_none() => stranded.push(j),
                    _ => {}
                }
            }
        }
        Ok(stranded)
    }

    /// `id` ran here ahead of its turn.
    pub fn ran(&self, id: &str) {
        self.ran
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(id.to_owned());
    }
}
