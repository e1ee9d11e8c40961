//! The history of a run (what the harness did, what each process reported)
//! and the checker, in the spirit of Jepsen's total-queue: every committed
//! message is delivered exactly once, in order, and nothing else is.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Instant;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Kind {
    /// Something the harness did or saw (deploy, redis down...).
    Harness { who: String, what: String },
    /// The sender stored message n (the API answered 201).
    Saved(u32),
    /// The receiver showed message n.
    Shown(u32),
    /// The receiver's inbox skipped a redelivery of message n.
    Skipped(u32),
    /// The receiver crashed right after recording message n.
    Crashed(u32),
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
    entries: Arc<Mutex<Vec<Entry>>>,
}

impl History {
    pub fn new() -> Self {
        History {
            start: Instant::now(),
            entries: Default::default(),
        }
    }

    pub fn push(&self, kind: Kind) {
        let at = self.start.elapsed().as_secs_f64();
        self.entries.lock().unwrap().push(Entry { at, kind });
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
        let n = |s: &str| -> Option<u32> {
            let i = s.find("\"msg ")?;
            s[i + 5..].split('"').next()?.parse().ok()
        };
        if process.starts_with("relay") {
            if line.contains("broker unavailable") {
                self.push(Kind::BrokerDown(process.to_owned()));
            }
            return;
        }
        let Some(rest) = line.strip_prefix(&format!("{process}: ")) else {
            return;
        };
        let Some(m) = n(rest) else { return };
        if rest.starts_with("saved ") {
            // The API's 201 is what counts as saved; the service line is only for the timeline.
        } else if rest.starts_with("shown ") {
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
                Kind::Harness { who, what } => (who.clone(), what.clone()),
                Kind::Saved(n) => ("consumers".into(), format!("msg {n} saved")),
                Kind::Shown(n) => ("workers".into(), format!("msg {n} shown")),
                Kind::Skipped(n) => (
                    "workers".into(),
                    format!("msg {n} again, already in inbox, skipped"),
                ),
                Kind::Crashed(n) => ("workers".into(), format!("crashed after recording msg {n}")),
                Kind::BrokerDown(relay) => {
                    // Once per outage is enough for the log.
                    if !broker_down_seen.insert(relay.clone()) {
                        continue;
                    }
                    (
                        "relay".into(),
                        "Redis unavailable; rows stay in the outbox, retrying".into(),
                    )
                }
            };
            if let Kind::Harness { who, .. } = &e.kind {
                if who == "redis" && what == "up" {
                    broker_down_seen.clear();
                }
            }
            out.push_str(&format!(
                "{:6.1}s  {:<10} {what}\n",
                e.at,
                format!("{who}:")
            ));
        }
        out
    }

    /// Judge the run.
    pub fn verdict(&self, unsent: Option<i64>) -> Verdict {
        let entries = self.entries();
        let saved: BTreeSet<u32> = entries
            .iter()
            .filter(|e| matches!(e.kind, Kind::Saved(_)))
            .map(|e| num(&e.kind))
            .collect();
        let mut shown_count: HashMap<u32, usize> = HashMap::new();
        let mut shown_order = Vec::new();
        for e in &entries {
            if let Kind::Shown(n) = e.kind {
                *shown_count.entry(n).or_default() += 1;
                shown_order.push(n);
            }
        }
        let received: BTreeSet<u32> = shown_count.keys().copied().collect();
        let lost: Vec<u32> = saved.difference(&received).copied().collect();
        let unexpected: Vec<u32> = received.difference(&saved).copied().collect();
        let duplicated: Vec<u32> = shown_count
            .iter()
            .filter(|(_, c)| **c > 1)
            .map(|(n, _)| *n)
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        // Causal order: message n+1 was sent after n was saved, so first showings must be increasing.
        let mut first_seen: BTreeMap<u32, usize> = BTreeMap::new();
        for (i, n) in shown_order.iter().enumerate() {
            first_seen.entry(*n).or_insert(i);
        }
        let firsts: Vec<u32> = {
            let mut v: Vec<(usize, u32)> = first_seen.iter().map(|(n, i)| (*i, *n)).collect();
            v.sort();
            v.into_iter().map(|(_, n)| n).collect()
        };
        let reordered = firsts.windows(2).filter(|w| w[1] < w[0]).count();
        Verdict {
            saved: saved.len(),
            received: received.len(),
            skipped: self.count(|k| matches!(k, Kind::Skipped(_))),
            lost,
            unexpected,
            duplicated,
            reordered,
            unsent,
        }
    }
}

fn num(k: &Kind) -> u32 {
    match k {
        Kind::Saved(n) | Kind::Shown(n) | Kind::Skipped(n) | Kind::Crashed(n) => *n,
        _ => 0,
    }
}

pub struct Verdict {
    pub saved: usize,
    pub received: usize,
    pub skipped: usize,
    pub lost: Vec<u32>,
    pub unexpected: Vec<u32>,
    pub duplicated: Vec<u32>,
    pub reordered: usize,
    pub unsent: Option<i64>,
}

impl Verdict {
    /// The seed's summary lines, then the checker's line.
    pub fn summary(&self) -> String {
        let list = |v: &[u32]| {
            if v.is_empty() {
                "none".to_owned()
            } else {
                v.iter()
                    .map(|n| format!("msg {n}"))
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
        s.push_str(&format!(
            "checker: lost {}, unexpected {}, duplicated deliveries {}, reordered {}, unsent {}\n",
            self.lost.len(),
            self.unexpected.len(),
            self.duplicated.len(),
            self.reordered,
            self.unsent.map_or("n/a".to_owned(), |u| u.to_string())
        ));
        s
    }

    pub fn clean(&self) -> bool {
        self.lost.is_empty()
            && self.unexpected.is_empty()
            && self.duplicated.is_empty()
            && self.reordered == 0
            && self.unsent.unwrap_or(0) == 0
    }
}
