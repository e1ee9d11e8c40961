//! The workers of one relay serving one schema, as a crew: while none of them
//! finds much at a pass, one worker (the first) holds the whole crew's share
//! of the partitions and the others stand by, owning nothing; the first batch
//! that comes back full spreads the partitions over all of them again.
//!
//! Why: a worker keeping up costs PostgreSQL a transaction per pass whatever
//! it finds, so four workers polling a trickle cost about four times what one
//! worker polling all their partitions does, with no latency gained (each
//! pass covers everything its worker owns). Backlogs still get every worker.
//!
//! Ownership itself does not change character: partitions still move only
//! between batches, through their advisory locks (see `ownership`), so the
//! crew decides nothing about per-key order; it only sets each worker's
//! target share.

use crate::Config;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

pub(crate) struct Crew {
    workers: usize,
    /// `consolidate_after`; zero: never consolidate.
    after: Duration,
    /// A full batch: spreads a consolidated crew.
    full: usize,
    /// A batch above this keeps a spread crew spread: about what one worker
    /// would find if it polled the others' partitions too.
    busy: usize,
    epoch: Instant,
    /// When a pass with a batch above `busy` (spread) or a full one
    /// (consolidated) last ended, in milliseconds since `epoch`.
    last_busy: AtomicU64,
    /// Such passes under way: the crew stays spread while one is, however
    /// slow the broker (a pass may take longer than `after`).
    busy_passes: AtomicUsize,
    consolidated: AtomicBool,
    /// Whether the first worker has a session; without one, the others keep
    /// their shares rather than leave partitions to nobody of this relay.
    first_online: AtomicBool,
}

impl Crew {
    pub(crate) fn new(config: &Config) -> Self {
        let workers = config.workers.max(1);
        Crew {
            workers,
            after: config.consolidate_after,
            full: config.batch_size as usize,
            busy: (config.batch_size as usize / workers).max(1),
            epoch: Instant::now(),
            // A relay starting may face a backlog: spread until it has
            // seen `after` of small batches.
            last_busy: AtomicU64::new(0),
            busy_passes: AtomicUsize::new(0),
            consolidated: AtomicBool::new(false),
            first_online: AtomicBool::new(false),
        }
    }

    fn now(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64
    }

    /// A worker of the crew claimed `found` events; a busy pass holds the
    /// crew spread until the returned guard drops, at the pass's end.
    pub(crate) fn claimed(self: &Arc<Self>, found: usize) -> Option<BusyPass> {
        if self.consolidated.load(Relaxed) {
            if found < self.full {
                return None;
            }
            self.consolidated.store(false, Relaxed);
            tracing::debug!(
                found,
                "a full batch: the relay's partitions spread over its workers"
            );
        } else if found <= self.busy {
            return None;
        }
        self.busy_passes.fetch_add(1, Relaxed);
        Some(BusyPass(self.clone()))
    }

    /// Whether one worker holds the crew's share now; turns true once no
    /// worker has claimed more than `busy` events for `after`.
    pub(crate) fn consolidated(&self) -> bool {
        if self.workers == 1 || self.after.is_zero() || !self.first_online.load(Relaxed) {
            return false;
        }
        if self.consolidated.load(Relaxed) {
            return true;
        }
        let quiet = self.now().saturating_sub(self.last_busy.load(Relaxed));
        if self.busy_passes.load(Relaxed) == 0 && quiet >= self.after.as_millis() as u64 {
            if !self.consolidated.swap(true, Relaxed) {
                tracing::debug!("keeping up: one worker takes the relay's partitions");
            }
            return true;
        }
        false
    }

    /// The first worker's session came up (`true`) or went (`false`).
    pub(crate) fn first_online(&self, n: usize, online: bool) {
        if n == 0 {
            self.first_online.store(online, Relaxed);
            if !online {
                // Its partitions are free: the others take their shares now.
                self.consolidated.store(false, Relaxed);
                self.last_busy.store(self.now(), Relaxed);
            }
        }
    }

    /// Partitions worker `n` aims to hold when one worker's fair share is `share`.
    pub(crate) fn share(&self, n: usize, share: usize) -> usize {
        match (self.consolidated(), n) {
            (false, _) => share,
            (true, 0) => share * self.workers,
            (true, _) => 0,
        }
    }
}

/// A pass whose batch keeps the crew spread, under way.
pub(crate) struct BusyPass(Arc<Crew>);

impl Drop for BusyPass {
    fn drop(&mut self) {
        let crew = &self.0;
        crew.last_busy.store(crew.now(), Relaxed);
        crew.busy_passes.fetch_sub(1, Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn crew(workers: usize, after: Duration) -> Arc<Crew> {
        let crew = Arc::new(Crew::new(&Config {
            workers,
            batch_size: 400,
            consolidate_after: after,
            ..Config::default()
        }));
        crew.first_online(0, true);
        crew
    }

    #[test]
    fn small_batches_consolidate_and_a_full_one_spreads() {
        // Long enough that no hiccup between two lines outlasts it.
        let after = Duration::from_millis(200);
        let c = crew(4, after);
        assert!(!c.consolidated(), "spread when starting");
        std::thread::sleep(after);
        assert!(c.claimed(100).is_none(), "not above 400 / 4");
        assert!(c.consolidated());
        assert_eq!((c.share(0, 16), c.share(1, 16), c.share(3, 16)), (64, 0, 0));
        assert!(c.claimed(399).is_none(), "large when spread, not full");
        assert!(c.consolidated());
        let pass = c.claimed(400);
        assert!(!c.consolidated(), "a full batch spreads at once");
        assert_eq!((c.share(0, 16), c.share(1, 16)), (16, 16));
        std::thread::sleep(after);
        assert!(!c.consolidated(), "spread while its pass lasts");
        drop(pass);
        assert!(!c.consolidated(), "and for `after` from its end");
        std::thread::sleep(after);
        assert!(c.consolidated());
    }

    #[test]
    fn busy_batches_keep_a_spread_crew_spread() {
        let c = crew(4, Duration::from_millis(1));
        let pass = c.claimed(101);
        assert!(pass.is_some());
        std::thread::sleep(Duration::from_millis(3));
        assert!(!c.consolidated(), "while a busy pass lasts");
        let c = crew(4, Duration::from_secs(3600));
        drop(c.claimed(101));
        assert!(!c.consolidated(), "after a busy pass");
    }

    #[test]
    fn never_with_one_worker_zero_after_or_the_first_offline() {
        let one = crew(1, Duration::from_millis(1));
        let never = crew(4, Duration::ZERO);
        let offline = crew(4, Duration::from_millis(1));
        offline.first_online(0, false);
        std::thread::sleep(Duration::from_millis(3));
        for c in [&one, &never, &offline] {
            assert!(!c.consolidated());
            assert_eq!(c.share(1, 16), 16);
        }
        offline.first_online(3, true); // not the first worker
        assert!(!offline.consolidated());
        offline.first_online(0, true);
        assert!(offline.consolidated());
        offline.first_online(0, false);
        assert!(
            !offline.consolidated(),
            "its partitions go back to the others"
        );
    }
}
