//! How often a consumer runs a failing handler before the message becomes a
//! dead letter, and how long it waits in between.

use std::time::Duration;

/// The consumer side's retry policy: `attempts` runs of the handler, with
/// exponential backoff and jitter between them, then the message is kept in
/// the inbox's dead letters (`postbox inbox-dlq`) and acknowledged, so the
/// broker moves on.
///
/// The message stays in hand while it is retried: later messages of the same
/// Kafka partition (or BullMQ worker slot) wait, so per-key order holds. The
/// count is kept in memory: a consumer restarted mid-retries starts it over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Handler runs before the message is dead-lettered (at least 1).
    pub attempts: u32,
    /// Wait before the second run; doubled for each further one. Each wait
    /// is drawn between half and all of that (jitter spreads instances
    /// apart): 200 ms waits 100–200 ms.
    pub backoff_min: Duration,
    /// The longest wait between two runs.
    pub backoff_max: Duration,
}

impl Default for RetryPolicy {
    /// 5 runs, waiting about 1 s, 2 s, 4 s, 8 s: a handler that fails for a
    /// passing reason (a peer service restarting) gets ~15 s to recover
    /// before an operator must look.
    fn default() -> Self {
        RetryPolicy {
            attempts: 5,
            backoff_min: Duration::from_secs(1),
            backoff_max: Duration::from_secs(60),
        }
    }
}

impl RetryPolicy {
    /// No retries: the first failure dead-letters the message.
    pub fn none() -> Self {
        RetryPolicy {
            attempts: 1,
            ..RetryPolicy::default()
        }
    }

    /// The wait after the `failures`-th failed run: `backoff_min · 2^(failures-1)`,
    /// capped at `backoff_max`, then drawn from its upper half (jitter, so
    /// consumers that failed together do not retry in lockstep).
    pub fn delay(&self, failures: u32) -> Duration {
        crate::Backoff {
            min: self.backoff_min,
            max: self.backoff_max,
        }
        .delay(failures.saturating_sub(1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_double_within_their_jitter_and_stop_at_the_cap() {
        let p = RetryPolicy {
            attempts: 10,
            backoff_min: Duration::from_millis(100),
            backoff_max: Duration::from_millis(500),
        };
        for _ in 0..100 {
            let d1 = p.delay(1);
            assert!(d1 >= Duration::from_millis(50) && d1 <= Duration::from_millis(100));
            let d3 = p.delay(3);
            assert!(d3 >= Duration::from_millis(200) && d3 <= Duration::from_millis(400));
            let d9 = p.delay(9);
            assert!(d9 >= Duration::from_millis(250) && d9 <= Duration::from_millis(500));
        }
        assert!(p.delay(u32::MAX) <= Duration::from_millis(500));
    }
}
