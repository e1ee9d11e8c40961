//! How fast `postbox replay` makes rows unsent again (`--rate`).
//!
//! By default (`auto`) the replay follows the relay: it makes the next chunk
//! unsent only once the relay has sent the previous one, sized for about
//! [`TARGET`] of the relay's work, and pauses as long as that chunk took
//! before the next. A replayed row comes after every row of its key already
//! waiting (it takes the replay's transaction id), so a live event committed
//! meanwhile waits behind one chunk at most, and the relay spends at least
//! half its time on everything else. When live events wait, the relay takes
//! longer to reach the replay's chunk, and the replay slows down with it.

use std::fmt;
use std::time::Duration;

/// The relay's work one chunk should take under `--rate auto`, beyond its
/// fixed part (chosen from `postbox-bench replay`: at 50 ms live events'
/// p99 wait rose from about 6 to 50 ms, at 10 ms to about 20 ms, while the
/// replay still went at 1,400 to 5,900 events/s; docs: benchmarks.md).
pub const TARGET: Duration = Duration::from_millis(10);

/// How long `--rate auto` waits for a chunk to be sent before it goes on:
/// its rest may be behind a held key, or no relay may be running.
pub const GIVE_UP: Duration = Duration::from_secs(2);

/// How often `--rate auto` looks whether the relay sent the chunk.
pub const LOOK_EVERY: Duration = Duration::from_millis(5);

/// `--rate`: how fast a replay goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rate {
    /// Follow the relay (see the module's documentation).
    Auto,
    /// At most this many events a second; 0: as fast as the database takes them.
    Fixed(u64),
}

impl fmt::Display for Rate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Rate::Auto => f.write_str("auto"),
            Rate::Fixed(n) => write!(f, "{n}"),
        }
    }
}

/// The value parser of `--rate`.
pub fn rate(s: &str) -> Result<Rate, String> {
    match s.trim() {
        "auto" => Ok(Rate::Auto),
        n => n.parse().map(Rate::Fixed).map_err(|_| {
            format!("{s:?} is neither auto nor a number of events a second (0: unlimited)")
        }),
    }
}

/// The chunk size and pauses of `--rate auto`.
///
/// How long the relay takes to send a chunk is a fixed part (its wake-up,
/// the claim's round trips, this replay's look every [`LOOK_EVERY`]) and a
/// part per row. The fixed part is the shortest wait seen so far; what a
/// chunk took beyond it is the relay's work on its rows, which the size aims
/// to keep near [`TARGET`].
#[derive(Debug)]
pub struct Follow {
    size: i64,
    max: i64,
    fixed: Option<Duration>,
}

impl Follow {
    /// Start small (the relay's speed is not known yet), up to `max` (`--chunk`).
    pub fn new(max: i64) -> Self {
        Follow {
            size: max.clamp(1, 20),
            max: max.max(1),
            fixed: None,
        }
    }

    /// The next chunk's size.
    pub fn size(&self) -> i64 {
        self.size
    }

    /// The relay sent a chunk in `took`: the pause before the next chunk (as
    /// long as this one took, so the relay spends at least half its time on
    /// everything else), whose size doubles while the relay's work on a chunk
    /// stays under half the target and halves once it passes the target.
    pub fn sent(&mut self, took: Duration) -> Duration {
        let fixed = self.fixed.map_or(took, |f| f.min(took));
        self.fixed = Some(fixed);
        let work = took.saturating_sub(fixed);
        if work < TARGET / 2 {
            self.size = (self.size * 2).min(self.max);
        } else if work > TARGET {
            self.size = (self.size / 2).max(1);
        }
        took
    }

    /// The relay did not send the whole chunk within [`GIVE_UP`]: smaller
    /// chunks, and no pause (the wait was one).
    pub fn gave_up(&mut self) -> Duration {
        self.size = (self.size / 2).max(1);
        Duration::ZERO
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_are_auto_or_a_number() {
        assert_eq!(rate("auto"), Ok(Rate::Auto));
        assert_eq!(rate("250"), Ok(Rate::Fixed(250)));
        assert_eq!(rate("0"), Ok(Rate::Fixed(0)));
        assert!(rate("-1").unwrap_err().contains("neither auto"));
        assert_eq!(Rate::Auto.to_string(), "auto");
        assert_eq!(Rate::Fixed(7).to_string(), "7");
    }

    #[test]
    fn chunks_grow_while_the_relay_keeps_up_and_shrink_when_it_is_busy() {
        // 15 ms is the relay's wake-up and the looks: the shortest wait so far.
        let fixed = Duration::from_millis(15);
        let mut f = Follow::new(500);
        assert_eq!(f.size(), 20);
        assert_eq!(f.sent(fixed), fixed);
        assert_eq!(f.size(), 40);
        f.sent(fixed + TARGET / 4);
        assert_eq!(f.size(), 80);
        f.sent(fixed + TARGET * 3 / 4);
        assert_eq!(f.size(), 80, "within the target: kept");
        f.sent(fixed + TARGET * 2);
        assert_eq!(f.size(), 40, "over the target: halved");
        for _ in 0..10 {
            f.sent(fixed);
        }
        assert_eq!(f.size(), 500, "capped by --chunk");
        // Live events fill the relay: a chunk takes a second.
        assert_eq!(f.sent(Duration::from_secs(1)), Duration::from_secs(1));
        assert_eq!(f.size(), 250);
        assert_eq!(f.gave_up(), Duration::ZERO);
        assert_eq!(f.size(), 125);
        for _ in 0..20 {
            f.gave_up();
        }
        assert_eq!(f.size(), 1);
        assert_eq!(Follow::new(10).size(), 10);
    }
}
