//! When a worker rebalances, claims or sleeps, for one database session: the
//! pacing of [`Worker::run`](super::Worker::run) as a small state machine
//! that is given the time instead of reading it, so its rules are tested
//! without a database or a sleep.
//!
//! The rules: on (re)connect, rebalance and claim at once (rows may have
//! waited). A full batch claims again at once. After a batch with events, poll
//! every `busy_poll_interval` for `busy_poll_for` (more are likely, and a
//! short poll needs no NOTIFY). Then arm the partitions' wake-ups and look
//! once more before sleeping until `poll_interval`; a wake-up or a rebalance
//! signal ends the sleep. A broker down backs off, growing until a pass gets
//! through. Rebalancing comes first whenever it is due.

use crate::Backoff;
use std::time::{Duration, Instant};

/// The settings the schedule follows (from [`Config`](crate::Config)).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Pace {
    pub rebalance_interval: Duration,
    pub poll_interval: Duration,
    pub busy_poll_interval: Duration,
    pub busy_poll_for: Duration,
    /// After a transient failure (the broker, or a session that cannot connect).
    pub backoff: Backoff,
}

impl Pace {
    pub(crate) fn of(c: &crate::Config) -> Self {
        Pace {
            rebalance_interval: c.rebalance_interval,
            poll_interval: c.poll_interval,
            busy_poll_interval: c.busy_poll_interval,
            busy_poll_for: c.busy_poll_for,
            backoff: Backoff {
                min: c.backoff_min,
                max: c.backoff_max,
            },
        }
    }
}

/// What the worker does next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Step {
    /// Take or give back partitions, then report with [`Schedule::rebalanced`].
    Rebalance,
    /// Claim a batch: say so with [`Schedule::claiming`], then report how it went.
    Claim,
    /// Wait for a wake-up or a rebalance signal, at most until then.
    Idle(Instant),
}

/// After a batch of less than a full one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Drained {
    /// The next poll is set.
    Poll,
    /// Arm the wake-ups of the partitions not armed yet, then report with
    /// [`Schedule::armed`].
    Arm,
}

/// The pacing state of one session.
#[derive(Debug)]
pub(crate) struct Schedule {
    pace: Pace,
    rebalance_now: bool,
    next_rebalance: Instant,
    claim_now: bool,
    next_poll: Instant,
    /// When a batch last found events.
    last_activity: Instant,
    /// Broker failures in a row, for the backoff.
    broker_failures: u32,
}

impl Schedule {
    /// A session just (re)connected at `now`.
    pub(crate) fn connected(pace: Pace, now: Instant) -> Self {
        Schedule {
            pace,
            rebalance_now: false,
            next_rebalance: now,
            claim_now: true,
            next_poll: now,
            last_activity: now,
            broker_failures: 0,
        }
    }

    /// What to do at `now`.
    pub(crate) fn step(&self, now: Instant) -> Step {
        if self.rebalance_now || now >= self.next_rebalance {
            Step::Rebalance
        } else if self.claim_now || now >= self.next_poll {
            Step::Claim
        } else {
            Step::Idle(self.next_poll.min(self.next_rebalance))
        }
    }

    /// A rebalance is wanted before the next claim (another worker joined or
    /// left, or the crew consolidated or spread).
    pub(crate) fn rebalance_soon(&mut self) {
        self.rebalance_now = true;
    }

    /// Rebalanced at `now`; `acquired`: newly taken partitions may hold a backlog.
    pub(crate) fn rebalanced(&mut self, now: Instant, acquired: bool) {
        self.rebalance_now = false;
        self.claim_now |= acquired;
        self.next_rebalance = now + self.pace.rebalance_interval;
    }

    /// New rows may be waiting (a wake-up).
    pub(crate) fn rows_waiting(&mut self) {
        self.claim_now = true;
    }

    /// A claim starts.
    pub(crate) fn claiming(&mut self) {
        self.claim_now = false;
    }

    /// The batch came back full at `now`: claim again at once.
    pub(crate) fn full(&mut self, now: Instant) {
        self.broker_failures = 0;
        self.claim_now = true;
        self.last_activity = now;
    }

    /// The batch found `found` events, less than a full one, at `now`;
    /// `all_armed`: the wake-ups of every owned partition are armed. `look_by`:
    /// the latest a partition needs another look (a hole in its ids that may
    /// fill), if any.
    pub(crate) fn drained(
        &mut self,
        now: Instant,
        found: usize,
        all_armed: bool,
        look_by: Option<Instant>,
    ) -> Drained {
        self.broker_failures = 0;
        if found > 0 {
            self.last_activity = now;
        }
        let then = if now < self.last_activity + self.pace.busy_poll_for {
            // Events just flowed: more are likely.
            self.next_poll = now + self.pace.busy_poll_interval;
            Drained::Poll
        } else if !all_armed {
            Drained::Arm
        } else {
            self.next_poll = now + self.pace.poll_interval;
            Drained::Poll
        };
        if let Some(due) = look_by {
            self.next_poll = self.next_poll.min(due);
        }
        then
    }

    /// Armed at `now`; `all`: every owned partition's wake-up is armed now,
    /// so look once more (a row committed before the arming sent no
    /// NOTIFY), then sleep. Not all: a producer's commit holds one of them
    /// right now, so poll shortly and find its row instead of waiting.
    pub(crate) fn armed(&mut self, now: Instant, all: bool, look_by: Option<Instant>) {
        if all {
            self.claim_now = true;
        } else {
            self.next_poll = now + self.pace.busy_poll_interval;
        }
        if let Some(due) = look_by {
            self.next_poll = self.next_poll.min(due);
        }
    }

    /// The broker failed transiently: how long to back off before claiming again.
    pub(crate) fn broker_down(&mut self) -> Duration {
        let delay = self.pace.backoff.delay(self.broker_failures);
        self.broker_failures += 1;
        self.claim_now = true;
        delay
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    fn pace() -> Pace {
        Pace {
            rebalance_interval: 1000 * MS,
            poll_interval: 1000 * MS,
            busy_poll_interval: MS,
            busy_poll_for: 100 * MS,
            backoff: Backoff {
                min: 100 * MS,
                max: 2000 * MS,
            },
        }
    }

    /// A session that connected and rebalanced at `t0`.
    fn started(t0: Instant) -> Schedule {
        let mut s = Schedule::connected(pace(), t0);
        assert_eq!(s.step(t0), Step::Rebalance);
        s.rebalanced(t0, false);
        s
    }

    #[test]
    fn a_new_session_rebalances_then_claims_at_once() {
        let t0 = Instant::now();
        let mut s = started(t0);
        assert_eq!(s.step(t0), Step::Claim);
        s.claiming();
        assert_eq!(s.drained(t0, 0, true, None), Drained::Poll);
        // Nothing found since connecting, but the session is new: busy polling.
        assert_eq!(s.step(t0), Step::Idle(t0 + MS));
    }

    #[test]
    fn a_full_batch_claims_again_and_a_rebalance_comes_first_when_due() {
        let t0 = Instant::now();
        let mut s = started(t0);
        s.claiming();
        s.full(t0 + 10 * MS);
        assert_eq!(s.step(t0 + 10 * MS), Step::Claim);
        s.claiming();
        s.full(t0 + 1000 * MS);
        assert_eq!(s.step(t0 + 1000 * MS), Step::Rebalance);
        s.rebalanced(t0 + 1000 * MS, false);
        assert_eq!(s.step(t0 + 1000 * MS), Step::Claim);
    }

    #[test]
    fn events_keep_it_polling_then_it_arms_and_sleeps() {
        let t0 = Instant::now();
        let mut s = started(t0);
        s.claiming();
        assert_eq!(s.drained(t0, 3, false, None), Drained::Poll);
        assert_eq!(s.step(t0), Step::Idle(t0 + MS));
        assert_eq!(s.step(t0 + MS), Step::Claim);
        // busy_poll_for after the last events: arm before sleeping.
        let t = t0 + 100 * MS;
        s.claiming();
        assert_eq!(s.drained(t, 0, false, None), Drained::Arm);
        s.armed(t, false, None);
        assert_eq!(s.step(t), Step::Idle(t + MS), "not all armed: poll shortly");
        s.claiming();
        assert_eq!(s.drained(t + MS, 0, true, None), Drained::Poll);
        // Asleep until the poll interval or the rebalance, whichever is first.
        assert_eq!(s.step(t + MS), Step::Idle(t0 + 1000 * MS));
    }

    #[test]
    fn once_all_are_armed_it_looks_once_more_before_sleeping() {
        let t0 = Instant::now();
        let mut s = started(t0);
        let t = t0 + 200 * MS;
        s.claiming();
        assert_eq!(s.drained(t, 0, false, None), Drained::Arm);
        s.armed(t, true, None);
        assert_eq!(s.step(t), Step::Claim);
        s.claiming();
        assert_eq!(s.drained(t, 0, true, None), Drained::Poll);
        assert_eq!(s.step(t), Step::Idle(t0 + 1000 * MS));
    }

    #[test]
    fn wake_ups_and_rebalance_signals_end_the_sleep() {
        let t0 = Instant::now();
        let mut s = started(t0);
        let t = t0 + 200 * MS;
        s.claiming();
        s.drained(t, 0, true, None);
        assert!(matches!(s.step(t), Step::Idle(_)));
        s.rows_waiting();
        assert_eq!(s.step(t), Step::Claim);
        s.claiming();
        s.drained(t, 0, true, None);
        s.rebalance_soon();
        assert_eq!(s.step(t), Step::Rebalance);
        // Newly acquired partitions are claimed at once.
        s.rebalanced(t, true);
        assert_eq!(s.step(t), Step::Claim);
    }

    #[test]
    fn a_hole_to_look_at_shortens_the_sleep() {
        let t0 = Instant::now();
        let mut s = started(t0);
        let t = t0 + 200 * MS;
        s.claiming();
        s.drained(t, 0, true, Some(t + 50 * MS));
        assert_eq!(s.step(t), Step::Idle(t + 50 * MS));
        s.claiming();
        // A later look never lengthens it.
        s.drained(t, 0, true, Some(t + 5000 * MS));
        assert_eq!(s.step(t), Step::Idle(t0 + 1000 * MS));
    }

    #[test]
    fn a_broker_down_backs_off_more_each_time_until_a_pass_gets_through() {
        let t0 = Instant::now();
        let mut s = started(t0);
        let delays: Vec<Duration> = (0..6).map(|_| s.broker_down()).collect();
        assert!(delays[0] <= 100 * MS && delays[0] >= 50 * MS, "{delays:?}");
        assert!(delays[5] >= 1000 * MS, "{delays:?}");
        assert_eq!(s.step(t0), Step::Claim);
        s.claiming();
        s.drained(t0, 1, true, None);
        assert!(s.broker_down() <= 100 * MS, "reset after a pass");
    }
}
