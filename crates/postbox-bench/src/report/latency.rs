//! Latency sections: percentiles per variant and rate, in milliseconds.

use super::Spread;
use serde::Serialize;

/// Latency of one variant at one rate, in milliseconds, over the repetitions.
#[derive(Debug, Clone, Serialize)]
pub struct LatencyRow {
    pub variant: String,
    pub baseline: bool,
    pub rate: u64,
    pub sent: u64,
    pub received: u64,
    pub p50_ms: Spread,
    pub p95_ms: Spread,
    pub p99_ms: Spread,
    pub max_ms: Spread,
    /// p50 of this row over the baseline's p50 at the same rate.
    pub p50_ratio: Option<f64>,
    /// p99 of this row over the baseline's, where the section compares tails.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub p99_ratio: Option<f64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct LatencySection {
    pub title: String,
    /// The baseline row's name in the ratio column's heading.
    pub ratio_to: String,
    pub rows: Vec<LatencyRow>,
}

impl LatencySection {
    pub fn print(&self) {
        println!("\n{} (ms)\n", self.title);
        let tails = self.rows.iter().any(|r| r.p99_ratio.is_some());
        println!(
            "| variant | msg/s | p50 | p95 | p99 | max | received | p50 ratio to {} |{}",
            self.ratio_to,
            if tails { " p99 ratio |" } else { "" }
        );
        println!(
            "|---|---|---|---|---|---|---|---|{}",
            if tails { "---|" } else { "" }
        );
        for r in &self.rows {
            let p99_ratio = match (tails, r.p99_ratio) {
                (false, _) => String::new(),
                (true, None) => " baseline |".to_owned(),
                (true, Some(x)) => format!(" {x:.1} |"),
            };
            println!(
                "| {} | {} | {} | {} | {} | {} | {}/{} | {} |{p99_ratio}",
                r.variant,
                r.rate,
                r.p50_ms.show(1),
                r.p95_ms.show(1),
                r.p99_ms.show(1),
                r.max_ms.show(1),
                r.received,
                r.sent,
                r.p50_ratio
                    .map_or("baseline".to_owned(), |x| format!("{x:.1}"))
            );
        }
    }
}
