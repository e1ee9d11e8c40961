//! The workers of one relay serving one schema, as a crew: while none of them
//! finds much at a pass, the first `keeping_up_workers` hold the whole crew's
//! share of the partitions and the others stand by, owning nothing; the
//! first batch that comes back full spreads the partitions over all of them
//! again.
//!
//! Why: a worker keeping up costs PostgreSQL a transaction per pass whatever
//! it finds, so four workers polling a trickle cost about four times what one
//! polling all their partitions does. One worker also claims, publishes and
//! commits for every partition in turn, which lengthens the latency tail
//! under heavy load; `keeping_up_workers` chooses. Backlogs still get every
//! worker.
//!
//! Ownership itself does not change character: partitions still move only
//! between batches, through their advisory locks (see `ownership`), so the
//! crew decides nothing about per-key order; it only sets each worker's
//! target share.
//!
//! While a sink cannot reach its broker the crew neither spreads nor
//! consolidates: the backlog that builds up would spread it, yet more
//! workers deliver nothing more, and partitions a worker gives back for its
//! crew-mates may be taken by another relay's worker first, so partitions
//! would change relays while no relay can publish (`health`).

use crate::Config;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

pub(crate) struct Crew {
    /// The schema, for the `postbox_relay_claiming_workers` gauge.
    schema: String,
    workers: usize,
    /// Workers that claim while consolidated: the first `active`.
    active: usize,
    /// `consolidate_after`; zero: never consolidate.
    after: Duration,
    /// A full batch: spreads a consolidated crew.
    full: usize,
    /// A batch above this keeps a spread crew spread: about what it would
    /// become once `active` workers poll every partition.
    busy: usize,
    epoch: Instant,
    /// Milliseconds the tests add to the clock instead of sleeping.
    #[cfg(test)]
    skew: AtomicU64,
    /// When a pass with a batch above `busy` (spread) or a full one
    /// (consolidated) last ended, in milliseconds since `epoch`.
    last_busy: AtomicU64,
    /// Such passes under way: the crew stays spread while one is, however
    /// slow the broker (a pass may take longer than `after`).
    busy_passes: AtomicUsize,
    consolidated: AtomicBool,
    /// Sessions of the `active` workers: without all of them, the others
    /// keep their shares rather than leave partitions to nobody.
    active_online: AtomicUsize,
    /// Read positions of partitions given back, for the worker that takes
    /// them next (consolidating and spreading move them often).
    pub(crate) handover: super::cursor::Handover,
    /// The relay's sinks: while one is unavailable the crew stays as it is.
    health: Option<Arc<crate::health::Health>>,
}

impl Crew {
    pub(crate) fn new(config: &Config, schema: &str, health: Arc<crate::health::Health>) -> Self {
        Crew {
            health: Some(health),
            ..Crew::healthy(config, schema)
        }
    }

    /// A crew whose broker always answers.
    fn healthy(config: &Config, schema: &str) -> Self {
        let workers = config.workers.max(1);
        let active = config.keeping_up_workers.clamp(1, workers);
        let crew = Crew {
            schema: schema.to_owned(),
            workers,
            active,
            after: config.consolidate_after,
            full: config.batch_size as usize,
            busy: (config.batch_size as usize * active / workers).max(1),
            epoch: Instant::now(),
            #[cfg(test)]
            skew: AtomicU64::new(0),
            // A relay starting may face a backlog: spread until it has
            // seen `after` of small batches.
            last_busy: AtomicU64::new(0),
            busy_passes: AtomicUsize::new(0),
            consolidated: AtomicBool::new(false),
            active_online: AtomicUsize::new(0),
            handover: Default::default(),
            health: None,
        };
        crew.report(workers);
        crew
    }

    /// How many of the relay's workers of this schema claim now.
    fn report(&self, claiming: usize) {
        metrics::gauge!("postbox_relay_claiming_workers", "schema" => self.schema.clone())
            .set(claiming as f64);
    }

    fn now(&self) -> u64 {
        let now = self.epoch.elapsed().as_millis() as u64;
        #[cfg(test)]
        let now = now + self.skew.load(Relaxed);
        now
    }

    /// A worker of the crew claimed `found` events; a busy pass holds the
    /// crew spread until the returned guard drops, at the pass's end.
    pub(crate) fn claimed(self: &Arc<Self>, found: usize) -> Option<BusyPass> {
        if self.broker_down() {
            return None;
        }
        if self.consolidated.load(Relaxed) {
            if found < self.full {
                return None;
            }
            self.consolidated.store(false, Relaxed);
            self.report(self.workers);
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

    /// Whether the first `active` workers hold the crew's share now; turns
    /// true once no worker has claimed more than `busy` events for `after`.
    pub(crate) fn consolidated(&self) -> bool {
        if self.active == self.workers
            || self.after.is_zero()
            || self.active_online.load(Relaxed) < self.active
        {
            return false;
        }
        if self.consolidated.load(Relaxed) || self.broker_down() {
            return self.consolidated.load(Relaxed);
        }
        let quiet = self.now().saturating_sub(self.last_busy.load(Relaxed));
        if self.busy_passes.load(Relaxed) == 0 && quiet >= self.after.as_millis() as u64 {
            if !self.consolidated.swap(true, Relaxed) {
                self.report(self.active);
                tracing::debug!(
                    workers = self.active,
                    "keeping up: fewer workers take the relay's partitions"
                );
            }
            return true;
        }
        false
    }

    /// Whether a sink of the relay cannot reach its broker now.
    fn broker_down(&self) -> bool {
        self.health
            .as_ref()
            .is_some_and(|h| h.down_for(std::time::Instant::now()).is_some())
    }

    /// Worker `n`'s session came up (`true`) or went (`false`); calls come
    /// in pairs.
    pub(crate) fn online(&self, n: usize, online: bool) {
        if n >= self.active {
            return;
        }
        if online {
            self.active_online.fetch_add(1, Relaxed);
        } else {
            self.active_online.fetch_sub(1, Relaxed);
            // Its partitions are free: the others take their shares now.
            if self.consolidated.swap(false, Relaxed) {
                self.report(self.workers);
            }
            self.last_busy.store(self.now(), Relaxed);
        }
    }

    /// Partitions worker `n` aims to hold when one worker's fair share is `share`.
    pub(crate) fn share(&self, n: usize, share: usize) -> usize {
        match (self.consolidated(), n < self.active) {
            (false, _) => share,
            (true, true) => (share * self.workers).div_ceil(self.active),
            (true, false) => 0,
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

    impl Crew {
        /// Move the crew's clock on by `d`.
        fn pass(&self, d: Duration) {
            self.skew.fetch_add(d.as_millis() as u64, Relaxed);
        }
    }

    fn crew(workers: usize, keeping_up_workers: usize, after: Duration) -> Arc<Crew> {
        let crew = Arc::new(Crew::healthy(
            &Config {
                workers,
                keeping_up_workers,
                batch_size: 400,
                consolidate_after: after,
                ..Config::default()
            },
            "test",
        ));
        for n in 0..workers {
            crew.online(n, true);
        }
        crew
    }

    #[test]
    fn small_batches_consolidate_and_a_full_one_spreads() {
        let after = Duration::from_secs(1);
        let c = crew(4, 1, after);
        assert!(!c.consolidated(), "spread when starting");
        c.pass(after);
        assert!(c.claimed(100).is_none(), "not above 400 × 1 / 4");
        assert!(c.consolidated());
        assert_eq!((c.share(0, 16), c.share(1, 16), c.share(3, 16)), (64, 0, 0));
        assert!(c.claimed(399).is_none(), "large when spread, not full");
        assert!(c.consolidated());
        let pass = c.claimed(400);
        assert!(!c.consolidated(), "a full batch spreads at once");
        assert_eq!((c.share(0, 16), c.share(1, 16)), (16, 16));
        c.pass(after);
        assert!(!c.consolidated(), "spread while its pass lasts");
        drop(pass);
        assert!(!c.consolidated(), "and for `after` from its end");
        c.pass(after);
        assert!(c.consolidated());
    }

    #[test]
    fn two_keeping_up_workers_share_the_crews_partitions() {
        let c = crew(4, 2, Duration::from_millis(1));
        c.pass(Duration::from_millis(3));
        assert!(c.claimed(200).is_none(), "not above 400 × 2 / 4");
        assert!(c.consolidated());
        let shares: Vec<usize> = (0..4).map(|n| c.share(n, 16)).collect();
        assert_eq!(shares, [32, 32, 0, 0]);
        let c = crew(3, 2, Duration::from_millis(1));
        c.pass(Duration::from_millis(3));
        assert!(c.consolidated());
        let shares: Vec<usize> = (0..3).map(|n| c.share(n, 22)).collect();
        assert_eq!(shares, [33, 33, 0], "rounded up: every partition covered");
    }

    #[test]
    fn busy_batches_keep_a_spread_crew_spread() {
        let c = crew(4, 1, Duration::from_millis(1));
        let pass = c.claimed(101);
        assert!(pass.is_some());
        c.pass(Duration::from_millis(3));
        assert!(!c.consolidated(), "while a busy pass lasts");
        let c = crew(4, 1, Duration::from_secs(3600));
        drop(c.claimed(101));
        assert!(!c.consolidated(), "after a busy pass");
    }

    #[test]
    fn never_with_all_workers_keeping_up_zero_after_or_one_offline() {
        let all = crew(4, 4, Duration::from_millis(1));
        let one = crew(1, 1, Duration::from_millis(1));
        let never = crew(4, 1, Duration::ZERO);
        let offline = crew(4, 2, Duration::from_millis(1));
        offline.online(1, false);
        for c in [&all, &one, &never, &offline] {
            c.pass(Duration::from_millis(3));
            assert!(!c.consolidated());
            assert_eq!(c.share(1, 16), 16);
        }
        offline.online(3, false); // stands by anyway
        offline.online(3, true);
        assert!(!offline.consolidated());
        offline.online(1, true);
        assert!(offline.consolidated());
        offline.online(0, false);
        assert!(
            !offline.consolidated(),
            "its partitions go back to the others"
        );
    }
}
