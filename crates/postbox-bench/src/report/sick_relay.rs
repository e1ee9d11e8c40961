//! The sick-relay section: per `unavailable_after` and workload, latency,
//! what arrived, and how often the relay behind the fault proxy stood by.

use super::{Ratio, Spread};
use serde::Serialize;

/// One workload at one `unavailable_after`, over the repetitions.
#[derive(Debug, Clone, Serialize)]
pub struct SickRelayRow {
    /// `unavailable_after` in milliseconds (0: ownership ignores health).
    pub unavailable_after_ms: u64,
    pub workload: String,
    /// The no-fault run of its `unavailable_after`.
    pub baseline: bool,
    /// Messages of the latency window, summed over the repetitions (a cut:
    /// those produced from the cut to 5 s after it; otherwise all).
    pub window_sent: u64,
    pub window_received: u64,
    /// Every message of the runs, summed over the repetitions.
    pub sent: u64,
    pub received: u64,
    /// Messages the consumer's inbox skipped as already received.
    pub duplicates: u64,
    pub p50_ms: Spread,
    pub p95_ms: Spread,
    pub p99_ms: Spread,
    pub max_ms: Spread,
    /// Times the relay behind the proxy stood by: its partitions went from
    /// some to none (its own counter, sampled every 10 ms).
    pub standbys: Spread,
    /// The same read as the other relays read it: its
    /// `outbox_relays.taking_partitions` going from true to false (sampled
    /// every 200 ms; summed over the repetitions).
    pub standbys_recorded: u64,
    /// Seconds that relay owned no partition.
    pub idle_s: Spread,
    /// Stand-bys of the relay with a direct path to Redis (none expected).
    pub other_standbys: u64,
    /// A cut: from the cut until the other relay owned every partition.
    pub handover_ms: Option<Spread>,
    /// A cut: from the heal until the cut-off relay owned partitions again.
    pub back_ms: Option<Spread>,
    /// Repetitions in which the cut-off relay stood by and had no partition
    /// again 30 s after the heal.
    pub never_back: u64,
    /// p99 over the no-fault row's p99 of the same `unavailable_after`.
    pub p99_ratio: Option<Ratio>,
}

#[derive(Debug, Clone, Serialize)]
pub struct SickRelaySection {
    pub rate: u64,
    pub cut_hold_s: f64,
    pub rows: Vec<SickRelayRow>,
}

impl SickRelayRow {
    fn label(&self) -> String {
        match self.unavailable_after_ms {
            0 => "0s (off)".into(),
            ms if ms % 1000 == 0 => format!("{}s", ms / 1000),
            ms => format!("{ms}ms"),
        }
    }

    /// `handed over in / back after`, for a cut.
    fn moves(&self) -> String {
        let show = |s: &Option<Spread>| s.as_ref().map_or("—".to_owned(), |s| s.show(0));
        match (&self.handover_ms, &self.back_ms) {
            (None, None) if self.never_back == 0 => "—".into(),
            (h, b) => {
                let never = match self.never_back {
                    0 => String::new(),
                    n => format!(", **never back in {n}**"),
                };
                format!("{} / {}{never}", show(h), show(b))
            }
        }
    }
}

impl SickRelaySection {
    pub fn print(&self) {
        println!(
            "\nOne relay cut off from its broker, or slow to reach it: {} msg/s, cut for {} s (ms)\n",
            self.rate, self.cut_hold_s
        );
        println!("| unavailable_after | workload | p50 | p99 | max | received | duplicates | stand-bys (s without partitions) | partitions to the other relay / back after the heal (ms) | p99 ratio |");
        println!("|---|---|---|---|---|---|---|---|---|---|");
        for r in &self.rows {
            let others = match r.other_standbys {
                0 => String::new(),
                n => format!(", **the other relay: {n}**"),
            };
            println!(
                "| {} | {} | {} | {} | {} | {}/{} | {} | {} ({}){others} | {} | {} |",
                r.label(),
                r.workload,
                r.p50_ms.show(1),
                r.p99_ms.show(1),
                r.max_ms.show(1),
                r.received,
                r.sent,
                r.duplicates,
                r.standbys.show(0),
                r.idle_s.show(1),
                r.moves(),
                r.p99_ratio
                    .as_ref()
                    .map_or("baseline".to_owned(), Ratio::show),
            );
        }
    }
}
