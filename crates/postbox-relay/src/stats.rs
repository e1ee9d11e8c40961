//! Counters the relay keeps about itself (exported as metrics later).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// Events delivered per schema and topic.
pub(crate) type Delivered = HashMap<String, HashMap<String, u64>>;

/// Live counters, shared by all workers of a relay.
#[derive(Debug, Default)]
pub struct Stats {
    pub(crate) published: AtomicU64,
    pub(crate) batches: AtomicU64,
    pub(crate) transient_errors: AtomicU64,
    pub(crate) rejected: AtomicU64,
    pub(crate) dead_lettered: AtomicU64,
    /// Partitions held by this relay's workers, all schemas together.
    pub(crate) owned: std::sync::atomic::AtomicI64,
    /// Delivered events not yet added to the schemas' `outbox_delivered`
    /// (the maintenance task takes them every `stats_interval`).
    pub(crate) delivered: std::sync::Mutex<Delivered>,
}

/// A copy of [`Stats`] at one instant.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StatsSnapshot {
    /// Events acknowledged by the broker and marked sent.
    pub published: u64,
    /// Non-empty batches committed.
    pub batches: u64,
    /// Transient broker failures (batches rolled back or partly marked).
    pub transient_errors: u64,
    /// Poison failures (attempts consumed).
    pub rejected: u64,
    /// Rows moved to the dead-letter table.
    pub dead_lettered: u64,
    /// Partitions this relay owns now.
    pub owned_partitions: i64,
}

impl Stats {
    /// Count more events delivered in `schema`: `(topic, how many)`.
    pub(crate) fn delivered(&self, schema: &str, counts: &[(&str, u64)]) {
        let mut all = self.delivered.lock().expect("delivered counts");
        let topics = match all.get_mut(schema) {
            Some(t) => t,
            None => all.entry(schema.to_owned()).or_default(),
        };
        for (topic, n) in counts {
            match topics.get_mut(*topic) {
                Some(c) => *c += n,
                None => {
                    topics.insert((*topic).to_owned(), *n);
                }
            }
        }
    }

    /// The delivered counts so far, leaving none.
    pub(crate) fn take_delivered(&self) -> Delivered {
        std::mem::take(&mut *self.delivered.lock().expect("delivered counts"))
    }

    /// Read all counters.
    pub fn snapshot(&self) -> StatsSnapshot {
        StatsSnapshot {
            published: self.published.load(Relaxed),
            batches: self.batches.load(Relaxed),
            transient_errors: self.transient_errors.load(Relaxed),
            rejected: self.rejected.load(Relaxed),
            dead_lettered: self.dead_lettered.load(Relaxed),
            owned_partitions: self.owned.load(Relaxed),
        }
    }
}
