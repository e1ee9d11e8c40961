//! How fast `postbox replay` makes rows unsent again (`--rate`).
//!
//! By default (`auto`) the replay follows the relay and the live events:
//! it makes the next chunk unsent only once the relay has sent the previous
//! one, and pauses as long as that chunk took before the next. A replayed row
//! comes after every row of its key already waiting (it takes the replay's
//! transaction id), so a live event committed meanwhile waits behind one chunk
//! at most, and the relay spends at least half its time on everything else.
//!
//! The chunk's size follows the live events' waits: after each chunk and each
//! pause the replay reads how long the live events written meanwhile waited
//! (`outbox_replay_live_waits.sql`). The longest wait of a pause is what
//! live events wait without the replay (smoothed: [`Follow::paused`]); while a
//! chunk was in flight, they may wait at most [`LIVE_SLOWER`] that: two
//! chunks in a row over it halve the next chunks (one can be a hiccup of the
//! machine's), and the size grows by a quarter while they wait less than
//! [`LIVE_CALM`] that. With no live events to watch, the size aims
//! at [`TARGET`] of the relay's work per chunk. When the relay takes longer
//! to reach the replay's chunks, the replay slows down with it.
//! (docs: benchmarks.md, "Live latency during a replay".)

use std::fmt;
use std::time::Duration;

/// The relay's work one chunk should take under `--rate auto` when no live
/// events are written, beyond its fixed part.
pub const TARGET: Duration = Duration::from_millis(10);

/// How much longer than without the replay live events may wait while a
/// chunk is in flight before the chunks are halved (the longest waits of
/// each compared).
pub const LIVE_SLOWER: f64 = 1.5;

/// Below how much longer than without the replay live events' waits let the
/// chunks grow.
pub const LIVE_CALM: f64 = 1.25;

/// Live waits shorter than this count as this much: a relay that claims
/// within a fraction of a millisecond would otherwise halve the chunks on
/// every scheduling hiccup.
pub const LIVE_FLOOR: Duration = Duration::from_millis(2);

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

/// The chunk size and pauses of `--rate auto` (see the module's
/// documentation).
///
/// How long the relay takes to send a chunk is a fixed part (its wake-up,
/// the claim's round trips, this replay's look every [`LOOK_EVERY`]) and a
/// part per row. The fixed part is the shortest wait seen so far; what a
/// chunk took beyond it is the relay's work on its rows.
#[derive(Debug)]
pub struct Follow {
    size: i64,
    max: i64,
    fixed: Option<Duration>,
    /// The live events' longest wait per pause, smoothed.
    calm: Option<Duration>,
    /// The last chunk made live events wait over [`LIVE_SLOWER`] calm.
    was_slower: bool,
}

impl Follow {
    /// Start small (the relay's speed is not known yet), up to `max` (`--chunk`).
    pub fn new(max: i64) -> Self {
        Follow {
            size: max.clamp(1, 20),
            max: max.max(1),
            fixed: None,
            calm: None,
            was_slower: false,
        }
    }

    /// The next chunk's size.
    pub fn size(&self) -> i64 {
        self.size
    }

    /// The relay sent a chunk in `took`, while live events waited at most
    /// `live` (`None`: none was written): the pause before the next chunk, as
    /// long as this one took.
    pub fn sent(&mut self, took: Duration, live: Option<Duration>) -> Duration {
        let fixed = self.fixed.map_or(took, |f| f.min(took));
        self.fixed = Some(fixed);
        let work = took.saturating_sub(fixed);
        let slower = live.zip(self.calm).map(|(busy, calm)| {
            busy.max(LIVE_FLOOR).as_secs_f64() / calm.max(LIVE_FLOOR).as_secs_f64()
        });
        self.size = match slower {
            // No live events to watch: the relay's work on the chunk decides.
            None if work > TARGET => self.size / 2,
            None if work < TARGET / 2 => self.size * 2,
            None => self.size,
            Some(slower) if slower > LIVE_SLOWER => {
                if std::mem::replace(&mut self.was_slower, true) {
                    self.was_slower = false;
                    self.size / 2
                } else {
                    self.size
                }
            }
            Some(slower) => {
                self.was_slower = false;
                if slower < LIVE_CALM {
                    self.size + (self.size / 4).max(1)
                } else {
                    self.size
                }
            }
        }
        .clamp(1, self.max);
        took
    }

    /// Live events written during a pause waited at most `live` (`None`:
    /// none was written): what they wait without the replay. Smoothed over
    /// the last few pauses, as one pause sees a few dozen events at most.
    pub fn paused(&mut self, live: Option<Duration>) {
        if let Some(wait) = live {
            self.calm = Some(self.calm.map_or(wait, |calm| (calm * 3 + wait) / 4));
        }
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

    impl Follow {
        fn sent_alone(&mut self, took: Duration) -> Duration {
            self.sent(took, None)
        }
    }

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
        assert_eq!(f.sent_alone(fixed), fixed);
        assert_eq!(f.size(), 40);
        f.sent_alone(fixed + TARGET / 4);
        assert_eq!(f.size(), 80);
        f.sent_alone(fixed + TARGET * 3 / 4);
        assert_eq!(f.size(), 80, "within the target: kept");
        f.sent_alone(fixed + TARGET * 2);
        assert_eq!(f.size(), 40, "over the target: halved");
        for _ in 0..10 {
            f.sent_alone(fixed);
        }
        assert_eq!(f.size(), 500, "capped by --chunk");
        // Live events fill the relay: a chunk takes a second.
        assert_eq!(f.sent_alone(Duration::from_secs(1)), Duration::from_secs(1));
        assert_eq!(f.size(), 250);
        assert_eq!(f.gave_up(), Duration::ZERO);
        assert_eq!(f.size(), 125);
        for _ in 0..20 {
            f.gave_up();
        }
        assert_eq!(f.size(), 1);
        assert_eq!(Follow::new(10).size(), 10);
    }

    #[test]
    fn chunks_shrink_when_live_events_wait_longer_than_without_the_replay() {
        let ms = |n: f64| Duration::from_secs_f64(n / 1000.0);
        let fixed = ms(15.0);
        let mut f = Follow::new(500);
        f.sent(fixed, Some(ms(6.0)));
        assert_eq!(f.size(), 40, "no pause seen yet: the relay's work decides");
        f.paused(Some(ms(6.0)));
        // LIVE_CALM (1.25) and LIVE_SLOWER (1.5) times 6 ms: 7.5 and 9 ms.
        f.sent(fixed, Some(ms(7.0)));
        assert_eq!(f.size(), 50, "live waits within LIVE_CALM: a quarter more");
        f.sent(fixed, Some(ms(8.5)));
        assert_eq!(f.size(), 50, "between LIVE_CALM and LIVE_SLOWER: kept");
        f.sent(fixed, Some(ms(10.0)));
        assert_eq!(f.size(), 50, "over LIVE_SLOWER once: a hiccup, kept");
        f.sent(fixed, Some(ms(10.0)));
        assert_eq!(f.size(), 25, "over LIVE_SLOWER twice in a row: halved");
        f.sent(fixed, None);
        assert_eq!(
            f.size(),
            50,
            "no live event written: the relay's work decides"
        );
        // Pauses smooth: one slow pause moves what counts as calm a quarter.
        f.paused(Some(ms(22.0)));
        f.sent(fixed, Some(ms(14.0)));
        assert_eq!(f.size(), 50, "14 ms against 10 ms calm: kept");
        // Over LIVE_SLOWER (15 ms now) twice, but not in a row: kept.
        f.sent(fixed, Some(ms(25.0)));
        f.sent(fixed, Some(ms(14.0)));
        f.sent(fixed, Some(ms(25.0)));
        assert_eq!(f.size(), 50);
        f.sent(fixed, Some(ms(25.0)));
        assert_eq!(f.size(), 25);
        // With live events to watch, their waits decide, not the relay's work.
        f.sent(fixed + TARGET * 2, Some(ms(10.0)));
        assert_eq!(f.size(), 31);
        // Sub-millisecond waits count as the floor.
        let mut g = Follow::new(500);
        g.paused(Some(ms(0.3)));
        g.sent(fixed, Some(ms(0.9)));
        g.sent(fixed, Some(ms(2.4)));
        assert_eq!(g.size(), 31, "within LIVE_CALM of the floor, twice");
    }
}
