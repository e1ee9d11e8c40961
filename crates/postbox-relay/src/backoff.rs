//! Capped exponential backoff with full jitter.

use rand::Rng;
use std::time::Duration;

/// Capped exponential backoff: attempt n waits a random time in
/// `[base·2ⁿ/2, base·2ⁿ]`, never more than `max`.
#[derive(Debug, Clone, Copy)]
pub struct Backoff {
    /// First delay.
    pub base: Duration,
    /// Upper bound.
    pub max: Duration,
}

impl Backoff {
    /// Delay before retry number `attempt` (0-based).
    pub fn delay(&self, attempt: u32) -> Duration {
        let exp = self
            .base
            .saturating_mul(1u32.checked_shl(attempt.min(30)).unwrap_or(u32::MAX))
            .min(self.max);
        // Half fixed, half random: spreads instances apart without ever retrying at once.
        let half = exp / 2;
        let jitter = rand::rng().random_range(0..=half.as_millis() as u64);
        half + Duration::from_millis(jitter)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grows_and_caps() {
        let b = Backoff {
            base: Duration::from_millis(100),
            max: Duration::from_secs(2),
        };
        for attempt in 0..40 {
            let d = b.delay(attempt);
            assert!(d <= Duration::from_secs(2), "{attempt}: {d:?}");
        }
        assert!(b.delay(0) <= Duration::from_millis(100));
        assert!(b.delay(0) >= Duration::from_millis(50));
        assert!(b.delay(10) >= Duration::from_secs(1));
    }
}
