//! Capped exponential backoff with jitter: the one schedule postbox waits by,
//! wherever it waits (the relay's reconnects and broker outages, its
//! per-event retries, a consumer's handler retries and database outages).

use std::time::Duration;

/// Capped exponential backoff: attempt n waits a random time in
/// `[min·2ⁿ/2, min·2ⁿ]`, never more than `max`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    /// First delay.
    pub min: Duration,
    /// Upper bound.
    pub max: Duration,
}

impl Backoff {
    /// Delay before retry number `attempt` (0-based).
    pub fn delay(&self, attempt: u32) -> Duration {
        let exp = self
            .min
            .saturating_mul(1u32.checked_shl(attempt.min(30)).unwrap_or(u32::MAX))
            .min(self.max);
        // Half fixed, half random: spreads instances apart without ever retrying at once.
        exp / 2 + exp.mul_f64(unit_random() / 2.0)
    }
}

/// A number in [0, 1) from the standard library's per-process random hash
/// keys: jitter needs no better randomness than that.
fn unit_random() -> f64 {
    use std::hash::{BuildHasher, Hasher};
    let bits = std::collections::hash_map::RandomState::new()
        .build_hasher()
        .finish();
    (bits >> 11) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grows_and_caps() {
        let b = Backoff {
            min: Duration::from_millis(100),
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
