//! Health-aware ownership: what each sink of this relay can do, and whether
//! the relay takes partitions.
//!
//! A sink is *unavailable* from the first sign of trouble (a publish the
//! broker took nothing of, or one with no answer after `health_interval`)
//! once its broker's own check (`Destination::check`) fails, and available
//! again at the first acknowledged publish or answered check. A refusal of
//! one event, or a publish failing while the broker answers its check, is
//! not an outage: every relay would meet the same, and moving partitions
//! would only move the problem.
//!
//! A relay with a sink unavailable for `unavailable_after` stands by (gives
//! its partitions back and leaves the schema's members) when another relay
//! has shown since the outage began that it can publish (`decide`); one
//! standing by takes its share back at its broker's first answer. Partitions
//! move only between batches, through their advisory locks, exactly as when
//! a relay stops: per-key order and "nothing unsent only in memory" are
//! unchanged. Each relay writes what it knows in the schema's
//! `outbox_relays` every `health_interval` (`record`), which is where the
//! others, `postbox status`, the console and the fleet gauges read it.
//! Docs: operations/several-relays.md.

mod record;
mod watched;

pub(crate) use record::{run as record, Recorder};
pub(crate) use watched::Watched;

use crate::Destination;
use chrono::{DateTime, Utc};
use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::{watch, Notify};

/// The longest error a sink's record keeps, in bytes.
const MAX_ERROR: usize = 300;

/// One sink's health, shared by its [`Watched`] wrapper (publishes), its
/// broker check (`broker_watch`) and the recorder.
pub(crate) struct SinkHealth {
    pub(crate) name: &'static str,
    state: Mutex<SinkState>,
    /// Events the broker acknowledged through this sink.
    sent: AtomicU64,
    /// A publish failed or is slow: check the broker now.
    pub(crate) suspect: Notify,
}

#[derive(Default, Clone)]
struct SinkState {
    /// Unavailable since, with the last error.
    down: Option<(Instant, String)>,
    /// The start of a failed or slow publish not yet judged by a check.
    suspect_since: Option<Instant>,
    /// The latest acknowledged publish.
    last_publish: Option<Instant>,
    /// The latest sign the broker works: an acknowledged publish or an
    /// answered check.
    confirmed: Option<Instant>,
}

/// A sink's state as the record shows it.
pub(crate) struct SinkReport {
    pub name: &'static str,
    pub down_for: Option<Duration>,
    pub error: Option<String>,
    pub last_publish: Option<Duration>,
    pub confirmed: Option<Duration>,
}

impl SinkHealth {
    pub(crate) fn new(name: &'static str) -> Self {
        SinkHealth {
            name,
            state: Mutex::default(),
            sent: AtomicU64::new(0),
            suspect: Notify::new(),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, SinkState> {
        self.state.lock().expect("sink health")
    }

    /// A publish that began at `started` ended: `delivered` events
    /// acknowledged, `failed` whether any failed transiently.
    pub(crate) fn published(&self, started: Instant, delivered: usize, failed: bool) {
        if delivered > 0 {
            self.sent.fetch_add(delivered as u64, Relaxed);
            let now = Instant::now();
            let mut s = self.state();
            s.down = None;
            s.suspect_since = None;
            s.last_publish = Some(now);
            s.confirmed = Some(now);
        } else if failed {
            self.suspected(started);
        }
    }

    /// A sign of trouble since `started`: the broker is checked now.
    pub(crate) fn suspected(&self, started: Instant) {
        let mut s = self.state();
        if s.suspect_since.is_none_or(|t| t > started) {
            s.suspect_since = Some(started);
        }
        drop(s);
        self.suspect.notify_one();
    }

    /// The broker's check that began at `started` answered `result`.
    pub(crate) fn checked(&self, started: Instant, result: Result<(), String>) {
        let mut s = self.state();
        match result {
            Ok(()) => {
                s.down = None;
                s.suspect_since = None;
                s.confirmed = Some(Instant::now());
            }
            Err(mut error) => {
                // A record, a status line and a console cell hold it.
                if error.len() > MAX_ERROR {
                    let mut end = MAX_ERROR;
                    while !error.is_char_boundary(end) {
                        end -= 1;
                    }
                    error.truncate(end);
                    error.push('…');
                }
                let since = match (&s.down, s.suspect_since) {
                    (Some((since, _)), _) => *since,
                    (None, Some(suspect)) => suspect.min(started),
                    (None, None) => started,
                };
                s.down = Some((since, error));
                s.suspect_since = None;
            }
        }
    }

    /// Since when the broker cannot be reached, if it cannot: what the
    /// workers ask at every pass (the crew), so nothing is copied.
    fn down_since(&self) -> Option<Instant> {
        self.state().down.as_ref().map(|(since, _)| *since)
    }

    /// Whether the last word on the broker was that it cannot be reached.
    #[cfg(test)]
    fn is_down(&self) -> bool {
        self.down_since().is_some()
    }

    pub(crate) fn report(&self, now: Instant) -> SinkReport {
        let s = self.state().clone();
        let ago = |t: Instant| now.saturating_duration_since(t);
        SinkReport {
            name: self.name,
            down_for: s.down.as_ref().map(|(t, _)| ago(*t)),
            error: s.down.map(|(_, e)| e),
            last_publish: s.last_publish.map(ago),
            confirmed: s.confirmed.map(ago),
        }
    }
}

/// A schema's side of ownership: whether this relay's workers take
/// partitions, and how many they own.
pub(crate) struct Standing {
    /// True: the workers are members and take their share; false: they
    /// stand by, owning nothing.
    pub(crate) taking: watch::Sender<bool>,
    pub(crate) owned: AtomicI64,
}

/// A sink the relay publishes through, and its health.
pub(crate) struct Tracked {
    pub(crate) health: Arc<SinkHealth>,
    /// The sink itself (its `check` and `reset`), not its [`Watched`].
    pub(crate) sink: Arc<dyn Destination>,
}

/// Every sink's health and every schema's standing, for one relay.
pub(crate) struct Health {
    pub(crate) sinks: Vec<Tracked>,
    schemas: HashMap<String, Standing>,
}

impl Health {
    pub(crate) fn new(schemas: &[postbox::SchemaName]) -> Self {
        Health {
            sinks: Vec::new(),
            schemas: schemas
                .iter()
                .map(|s| {
                    // Nobody takes partitions before the first decision.
                    let standing = Standing {
                        taking: watch::channel(false).0,
                        owned: AtomicI64::new(0),
                    };
                    (s.to_string(), standing)
                })
                .collect(),
        }
    }

    /// `destination` with each of its sinks (a router's, or itself)
    /// reporting to a health of its own; a sink several routes share is
    /// tracked once. `slow`: a publish unanswered that long is a sign of
    /// trouble.
    pub(crate) fn watch(
        &mut self,
        destination: Arc<dyn Destination>,
        slow: Duration,
    ) -> Arc<dyn Destination> {
        let mut watched: Vec<(Arc<dyn Destination>, Arc<dyn Destination>)> = Vec::new();
        let mut wrap = |sink: Arc<dyn Destination>| -> Arc<dyn Destination> {
            let same = |(s, _): &&(Arc<dyn Destination>, _)| {
                std::ptr::addr_eq(Arc::as_ptr(s), Arc::as_ptr(&sink))
            };
            if let Some((_, w)) = watched.iter().find(same) {
                return w.clone();
            }
            let health = Arc::new(SinkHealth::new(sink.name()));
            self.sinks.push(Tracked {
                health: health.clone(),
                sink: sink.clone(),
            });
            let w: Arc<dyn Destination> = Arc::new(Watched::new(sink.clone(), health, slow));
            watched.push((sink, w.clone()));
            w
        };
        match destination.with_sinks_wrapped(&mut wrap) {
            Some(d) => d,
            None => wrap(destination),
        }
    }

    pub(crate) fn standing(&self, schema: &str) -> &Standing {
        &self.schemas[schema]
    }

    /// The longest current outage among the sinks.
    pub(crate) fn down_for(&self, now: Instant) -> Option<Duration> {
        self.sinks
            .iter()
            .filter_map(|s| s.health.down_since())
            .min()
            .map(|since| now.saturating_duration_since(since))
    }

    /// How long ago every sink was last seen working (the oldest of the
    /// sinks' latest confirmations); `None` while one never was.
    pub(crate) fn confirmed(&self, now: Instant) -> Option<Duration> {
        self.sinks
            .iter()
            .map(|s| s.health.report(now).confirmed)
            .try_fold(Duration::ZERO, |oldest, c| c.map(|c| c.max(oldest)))
    }

    /// Events acknowledged through every sink so far.
    pub(crate) fn sent(&self) -> u64 {
        self.sinks.iter().map(|s| s.health.sent.load(Relaxed)).sum()
    }
}

/// What a relay reads of the others' records of one schema.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Peers {
    /// Live relays that showed, after this relay's outage began, that
    /// every sink of theirs works.
    pub can_publish: i64,
    /// Sessions that own partitions (only asked while this relay owns none).
    pub owning: i64,
}

/// Whether this relay takes partitions, given whether it does now
/// (`taking`), its longest sink outage, and the others.
///
/// - Every sink works: take a share.
/// - Taking, with a sink down for `after`: stand by, if another relay can
///   publish. When none can, stay: moving would gain nothing, and every
///   relay moving at once is a herd.
/// - Standing by (or starting) with a sink down: stay out while another
///   relay serves; take partitions only when no live relay owns any (the
///   others died): someone must hold them for when a broker answers.
pub(crate) fn decide(
    taking: bool,
    down_for: Option<Duration>,
    after: Duration,
    peers: Peers,
) -> bool {
    let Some(down_for) = down_for else {
        return true;
    };
    if after.is_zero() {
        return true;
    }
    if taking {
        down_for < after || peers.can_publish == 0
    } else {
        peers.can_publish == 0 && peers.owning == 0
    }
}

/// `now - ago` on the wall clock, for the record.
pub(crate) fn wall(ago: Duration) -> DateTime<Utc> {
    Utc::now() - chrono::Duration::from_std(ago).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Duration = Duration::from_secs(1);

    #[test]
    fn ownership_follows_health() {
        let none = Peers::default();
        let healthy = Peers {
            can_publish: 1,
            owning: 1,
        };
        let sick_owner = Peers {
            can_publish: 0,
            owning: 1,
        };
        let after = 3 * S;
        // Healthy: always take.
        assert!(decide(true, None, after, healthy));
        assert!(decide(false, None, after, healthy));
        // Down, not yet for `after`: keep.
        assert!(decide(true, Some(2 * S), after, healthy));
        // Down for `after`, another relay can publish: stand by.
        assert!(!decide(true, Some(after), after, healthy));
        // Nobody can publish: nobody moves.
        assert!(decide(true, Some(60 * S), after, sick_owner));
        assert!(decide(true, Some(60 * S), after, none));
        // Starting or standing by while down: stay out while another serves,
        // even when it cannot publish either (no herd on recovery)...
        assert!(!decide(false, Some(Duration::ZERO), after, healthy));
        assert!(!decide(false, Some(60 * S), after, sick_owner));
        // ...but hold the partitions when nobody does.
        assert!(decide(false, Some(60 * S), after, none));
        // `0s`: ownership ignores health.
        assert!(decide(true, Some(60 * S), Duration::ZERO, healthy));
        assert!(decide(false, Some(60 * S), Duration::ZERO, healthy));
    }

    #[test]
    fn a_sink_is_down_once_a_check_confirms_the_trouble() {
        let h = SinkHealth::new("redis");
        let t0 = Instant::now();
        h.published(t0, 0, true);
        assert!(
            h.report(Instant::now()).down_for.is_none(),
            "only suspected"
        );
        let t1 = Instant::now();
        h.checked(t1, Err("connection refused".into()));
        let r = h.report(Instant::now());
        assert!(
            r.down_for.unwrap() >= t1 - t0,
            "counted from the failed publish"
        );
        assert_eq!(r.error.as_deref(), Some("connection refused"));
        // A later failure keeps the outage's start.
        h.checked(Instant::now(), Err("timed out".into()));
        assert!(h.report(Instant::now()).down_for.unwrap() >= t1 - t0);
        // A publish that failed while the check answers is no outage.
        h.checked(Instant::now(), Ok(()));
        assert!(!h.is_down());
        h.published(Instant::now(), 0, true);
        h.checked(Instant::now(), Ok(()));
        assert!(!h.is_down());
        // An acknowledged publish ends an outage.
        h.checked(Instant::now(), Err("x".into()));
        h.published(Instant::now(), 3, false);
        assert!(!h.is_down());
        assert_eq!(h.sent.load(Relaxed), 3);
    }
}
