//! The history of a run (what the harness did, what each process reported)
//! and the checker, in the spirit of Jepsen's total-queue: every committed
//! message is delivered exactly once, in order per chat, and nothing else is.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

/// One chat message of a run: the n-th message the harness sent in a chat.
/// Its body is `msg <n>` in chat 1 and `c<chat> msg <n>` elsewhere.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Msg {
    pub chat: i64,
    pub n: u32,
}

impl Msg {
    pub fn body(&self) -> String {
        if self.chat == 1 {
            format!("msg {}", self.n)
        } else {
            format!("c{} msg {}", self.chat, self.n)
        }
    }

    /// Find the quoted body in a service's line and read it back.
    fn parse(line: &str) -> Option<Msg> {
        let start = line.find('"')? + 1;
        let body = &line[start..start + line[start..].find('"')?];
        let (chat, rest) = match body.strip_prefix('c') {
            Some(r) => {
                let (c, rest) = r.split_once(' ')?;
                (c.parse().ok()?, rest)
            }
            None => (1, body),
        };
        Some(Msg {
            chat,
            n: rest.strip_prefix("msg ")?.parse().ok()?,
        })
    }
}

impl fmt::Display for Msg {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.body())
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Kind {
    /// Something the harness did or saw (deploy, redis down...).
    Harness { who: String, what: String },
    /// The harness is about to send the message (latency starts here).
    Sending(Msg),
    /// The sender stored the message (the API answered 201).
    Saved(Msg),
    /// The request may have reached the service, but no answer says whether
    /// it was stored (HTTP 5xx, or the connection broke after it was sent):
    /// like Jepsen's `info` operations, it may be delivered once or not at
    /// all, never twice. The sender goes on with a new message number.
    Indeterminate(Msg),
    /// The receiver showed the message.
    Shown(Msg),
    /// The receiver's inbox skipped a redelivery.
    Skipped(Msg),
    /// The receiver crashed right after recording the message.
    Crashed(Msg),
    /// A relay reported the broker unavailable.
    BrokerDown(String),
}

#[derive(Debug, Clone)]
pub struct Entry {
    pub at: f64,
    pub kind: Kind,
}

/// Shared, append-only record of a run.
#[derive(Clone)]
pub struct History {
    start: Instant,
    /// Wall-clock milliseconds at `start`, to put brokers' timestamps on this clock.
    start_epoch_ms: f64,
    entries: Arc<Mutex<Vec<Entry>>>,
}

impl History {
    pub fn new() -> Self {
        let epoch = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        History {
            start: Instant::now(),
            start_epoch_ms: epoch.as_secs_f64() * 1000.0,
            entries: Default::default(),
        }
    }

    pub fn push(&self, kind: Kind) {
        let at = self.start.elapsed().as_secs_f64();
        self.entries.lock().unwrap().push(Entry { at, kind });
    }

    /// Seconds since the history began (the clock of [`Entry::at`]).
    pub fn elapsed(&self) -> f64 {
        self.start.elapsed().as_secs_f64()
    }

    /// A wall-clock time (Unix milliseconds) on the clock of [`Entry::at`].
    pub fn at_epoch_ms(&self, ms: f64) -> f64 {
        (ms - self.start_epoch_ms) / 1000.0
    }

    pub fn harness(&self, who: &str, what: impl Into<String>) {
        self.push(Kind::Harness {
            who: who.into(),
            what: what.into(),
        });
    }

    pub fn entries(&self) -> Vec<Entry> {
        self.entries.lock().unwrap().clone()
    }

    pub fn count(&self, f: impl Fn(&Kind) -> bool) -> usize {
        self.entries
            .lock()
            .unwrap()
            .iter()
            .filter(|e| f(&e.kind))
            .count()
    }

    /// Turn a line printed by a process into history, if it says something the checker needs.
    pub fn ingest(&self, process: &str, line: &str) {
        if process.starts_with("relay") {
            if line.contains("broker unavailable") {
                self.push(Kind::BrokerDown(process.to_owned()));
            }
            return;
        }
        // Only the receiving side's reports count; the API's 201 is what counts as saved.
        if process != "workers" {
            return;
        }
        let Some(rest) = line.strip_prefix("workers: ") else {
            return;
        };
        let Some(m) = Msg::parse(rest) else { return };
        if rest.starts_with("shown ") {
            self.push(Kind::Shown(m));
        } else if rest.contains("already in inbox, skipped") {
            self.push(Kind::Skipped(m));
        } else if rest.starts_with("crashed after recording") {
            self.push(Kind::Crashed(m));
        }
    }

    /// The timeline, like the seed's log.
    pub fn timeline(&self) -> String {
        let mut out = String::new();
        let mut broker_down_seen: BTreeSet<String> = BTreeSet::new();
        for e in self.entries() {
            let (who, what) = match &e.kind {
                Kind::Harness { who, what } => {
                    if who == "redis" && what == "up" {
                        broker_down_seen.clear();
                    }
                    (who.clone(), what.clone())
                }
                Kind::Sending(_) => continue,
                Kind::Saved(m) => ("consumers".into(), format!("{m} saved")),
                Kind::Indeterminate(m) => (
                    "consumers".into(),
                    format!("{m} indeterminate (no answer whether saved); sending a new message"),
                ),
                Kind::Shown(m) => ("workers".into(), format!("{m} shown")),
                Kind::Skipped(m) => (
                    "workers".into(),
                    format!("{m} again, already in inbox, skipped"),
                ),
                Kind::Crashed(m) => ("workers".into(), format!("crashed after recording {m}")),
                Kind::BrokerDown(relay) => {
                    // Once per outage is enough for the log.
                    if !broker_down_seen.insert(relay.clone()) {
                        continue;
                    }
                    (
                        "relay".into(),
                        "broker unavailable; rows stay in the outbox, retrying".into(),
                    )
                }
            };
            out.push_str(&format!(
                "{:6.1}s  {:<10} {what}\n",
                e.at,
                format!("{who}:")
            ));
        }
        out
    }

    /// Send → first shown, in milliseconds, for the messages of `chat`.
    pub fn latencies(&self, chat: i64) -> Vec<f64> {
        let mut sending: HashMap<Msg, f64> = HashMap::new();
        let mut out = Vec::new();
        for e in self.entries() {
            match e.kind {
                Kind::Sending(m) if m.chat == chat => {
                    sending.insert(m, e.at);
                }
                Kind::Shown(m) if m.chat == chat => {
                    if let Some(t) = sending.remove(&m) {
                        out.push((e.at - t) * 1000.0);
                    }
                }
                _ => {}
            }
        }
        out
    }

    /// Judge the run.
    pub fn verdict(&self, unsent: Option<i64>) -> Verdict {
        let entries = self.entries();
        let saved: BTreeSet<Msg> = entries
            .iter()
            .filter_map(|e| match e.kind {
                Kind::Saved(m) => Some(m),
                _ => None,
            })
            .collect();
        let mut shown_count: HashMap<Msg, usize> = HashMap::new();
        let mut first_shown: Vec<Msg> = Vec::new();
        for e in &entries {
            if let Kind::Shown(m) = e.kind {
                let c = shown_count.entry(m).or_default();
                if *c == 0 {
                    first_shown.push(m);
                }
                *c += 1;
            }
        }
        let indeterminate: BTreeSet<Msg> = entries
            .iter()
            .filter_map(|e| match e.kind {
                Kind::Indeterminate(m) => Some(m),
                _ => None,
            })
            .collect();
        let received: BTreeSet<Msg> = shown_count.keys().copied().collect();
        // Each message of a chat was sent after the previous one was saved
        // (or answered indeterminately: its transaction was over by then),
        // so within a chat the first showings must come in sending order.
        let mut last: BTreeMap<i64, u32> = BTreeMap::new();
        let mut reordered = Vec::new();
        for m in &first_shown {
            if let Some(prev) = last.insert(m.chat, m.n) {
                if m.n < prev {
                    reordered.push(Reordered {
                        first: *m,
                        after: prev,
                    });
                }
            }
        }
        Verdict {
            saved: saved.len(),
            received: received.len(),
            skipped: self.count(|k| matches!(k, Kind::Skipped(_))),
            lost: saved.difference(&received).copied().collect(),
            unexpected: received
                .iter()
                .filter(|m| !saved.contains(m) && !indeterminate.contains(m))
                .copied()
                .collect(),
            indeterminate: indeterminate.len(),
            indeterminate_delivered: indeterminate.intersection(&received).count(),
            duplicated: shown_count
                .iter()
                .filter(|(_, c)| **c > 1)
                .map(|(m, _)| *m)
                .collect::<BTreeSet<_>>()
                .into_iter()
                .collect(),
            reordered,
            unsent,
        }
    }
}

pub struct Verdict {
    pub saved: usize,
    pub received: usize,
    pub skipped: usize,
    pub lost: Vec<Msg>,
    /// Shown but neither saved nor indeterminate.
    pub unexpected: Vec<Msg>,
    /// Sent without knowing whether they were stored (see [`Kind::Indeterminate`]).
    pub indeterminate: usize,
    /// Of those, how many were shown (once; twice counts as duplicated).
    pub indeterminate_delivered: usize,
    pub duplicated: Vec<Msg>,
    pub reordered: Vec<Reordered>,
    pub unsent: Option<i64>,
}

/// A message first shown after a later message of its chat.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reordered {
    pub first: Msg,
    /// The number of the later message shown before it.
    pub after: u32,
}

impl Reordered {
    /// The messages of the chat from the one before `first` to the one after
    /// `after`, at most `limit`, to explain where the order broke.
    pub fn around(&self, limit: u32) -> Vec<Msg> {
        let from = self.first.n.saturating_sub(1).max(1);
        let to = (self.after + 1).min(from + limit.max(1) - 1);
        (from..=to)
            .map(|n| Msg {
                chat: self.first.chat,
                n,
            })
            .collect()
    }
}

impl Verdict {
    /// The seed's summary lines, then the checker's line.
    pub fn summary(&self) -> String {
        let list = |v: &[Msg]| {
            if v.is_empty() {
                "none".to_owned()
            } else {
                v.iter()
                    .map(|m| m.to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            }
        };
        let mut s = format!(
            "saved by consumers: {}   received by workers: {}   duplicates skipped: {}\nlost: {}\n",
            self.saved,
            self.received,
            self.skipped,
            list(&self.lost)
        );
        if let Some(u) = self.unsent {
            s.push_str(&format!("unsent in outbox: {u}\n"));
        }
        if self.indeterminate > 0 {
            s.push_str(&format!(
                "indeterminate: {} ({} delivered)\n",
                self.indeterminate, self.indeterminate_delivered
            ));
        }
        s.push_str(&format!(
            "checker: lost {}, unexpected {}, duplicated deliveries {}, reordered {}, unsent {}\n",
            self.lost.len(),
            self.unexpected.len(),
            self.duplicated.len(),
            self.reordered.len(),
            self.unsent.map_or("n/a".to_owned(), |u| u.to_string())
        ));
        s
    }

    pub fn clean(&self) -> bool {
        self.lost.is_empty()
            && self.unexpected.is_empty()
            && self.duplicated.is_empty()
            && self.reordered.is_empty()
            && self.unsent.unwrap_or(0) == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bodies_round_trip() {
        for m in [Msg { chat: 1, n: 7 }, Msg { chat: 3, n: 12 }] {
            assert_eq!(
                Msg::parse(&format!("shown {:?} in chat {}", m.body(), m.chat)),
                Some(m)
            );
        }
    }

    #[test]
    fn checker_finds_loss_duplicates_and_reordering() {
        let h = History::new();
        let m = |n| Msg { chat: 2, n };
        for n in 1..=4 {
            h.push(Kind::Saved(m(n)));
        }
        for n in [1, 3, 2, 3] {
            h.push(Kind::Shown(m(n)));
        }
        h.push(Kind::Shown(Msg { chat: 9, n: 1 }));
        let v = h.verdict(Some(0));
        assert_eq!(v.lost, vec![m(4)]);
        assert_eq!(v.duplicated, vec![m(3)]);
        assert_eq!(v.unexpected, vec![Msg { chat: 9, n: 1 }]);
        assert_eq!(
            v.reordered,
            vec![Reordered {
                first: m(2),
                after: 3
            }]
        );
        assert_eq!(v.reordered[0].around(10), vec![m(1), m(2), m(3), m(4)]);
        assert!(!v.clean());
    }

    #[test]
    fn indeterminate_messages_may_arrive_once_or_not_at_all() {
        let h = History::new();
        let m = |n| Msg { chat: 1, n };
        h.push(Kind::Indeterminate(m(1)));
        h.push(Kind::Saved(m(2)));
        h.push(Kind::Indeterminate(m(3)));
        h.push(Kind::Saved(m(4)));
        for n in [1, 2, 4] {
            h.push(Kind::Shown(m(n)));
        }
        let v = h.verdict(Some(0));
        assert!(v.clean(), "{}", v.summary());
        assert_eq!((v.indeterminate, v.indeterminate_delivered), (2, 1));
        // Never twice.
        h.push(Kind::Shown(m(1)));
        let v = h.verdict(Some(0));
        assert_eq!(v.duplicated, vec![m(1)]);
        assert!(v.unexpected.is_empty());
        assert!(!v.clean());
    }
}
