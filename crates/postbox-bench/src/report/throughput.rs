//! Throughput sections: rows in one unit next to the baselines of the same
//! run, each over the repetitions (median, min–max), and their ratios.

use serde::Serialize;

/// Repetitions of one figure: median, min and max (and every sample, for the JSON).
#[derive(Debug, Clone, Serialize)]
pub struct Spread {
    pub median: f64,
    pub min: f64,
    pub max: f64,
    pub samples: Vec<f64>,
}

impl Spread {
    pub fn new(samples: Vec<f64>) -> Spread {
        let mut v = samples.clone();
        v.sort_by(f64::total_cmp);
        let median = match v.len() {
            0 => f64::NAN,
            n if n % 2 == 1 => v[n / 2],
            n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
        };
        Spread {
            median,
            min: v.first().copied().unwrap_or(f64::NAN),
            max: v.last().copied().unwrap_or(f64::NAN),
            samples,
        }
    }

    /// `1234 (1200–1300)`, with `decimals` digits.
    pub(crate) fn show(&self, decimals: usize) -> String {
        if self.samples.len() < 2 {
            return format!("{:.decimals$}", self.median);
        }
        format!(
            "{:.decimals$} ({:.decimals$}–{:.decimals$})",
            self.median, self.min, self.max
        )
    }
}

/// One throughput figure and how it compares with the baselines of its section.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    pub name: String,
    /// A baseline of its section (grey in the chart), not the system measured.
    pub baseline: bool,
    pub value: Spread,
    /// This row against each baseline row named.
    pub ratios: Vec<Ratio>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Ratio {
    pub to: String,
    /// The median of `per_rep` when both rows have a sample from every
    /// repetition, else median over median.
    pub ratio: f64,
    /// Each repetition's sample over the baseline's sample of the same
    /// repetition: both ran minutes apart, so a machine that drifts over a
    /// run moves them together and their ratio less than either.
    pub per_rep: Vec<f64>,
}

impl Ratio {
    pub(crate) fn new(to: &str, row: &Spread, baseline: &Spread) -> Ratio {
        let paired = row.samples.len() == baseline.samples.len() && !row.samples.is_empty();
        let per_rep: Vec<f64> = if paired {
            row.samples
                .iter()
                .zip(&baseline.samples)
                .map(|(r, b)| r / b)
                .collect()
        } else {
            Vec::new()
        };
        let ratio = if paired {
            Spread::new(per_rep.clone()).median
        } else {
            row.median / baseline.median
        };
        Ratio {
            to: to.into(),
            ratio,
            per_rep,
        }
    }

    /// `0.91 × alone`, or with the repetitions' range, `0.91 (0.85–0.97) × alone`.
    pub(crate) fn show(&self) -> String {
        let spread = Spread::new(self.per_rep.clone());
        if self.per_rep.len() < 2 {
            return format!("{:.2} × {}", self.ratio, self.to);
        }
        format!(
            "{:.2} ({:.2}–{:.2}) × {}",
            self.ratio, spread.min, spread.max, self.to
        )
    }
}

/// A throughput benchmark: rows in one unit, baselines among them.
#[derive(Debug, Clone, Serialize)]
pub struct Section {
    pub title: String,
    pub unit: String,
    pub rows: Vec<Row>,
    /// Rows that could not be measured, and why.
    pub skipped: Vec<String>,
}

impl Section {
    pub fn new(title: &str, unit: &str) -> Section {
        Section {
            title: title.into(),
            unit: unit.into(),
            rows: Vec::new(),
            skipped: Vec::new(),
        }
    }

    pub fn baseline(&mut self, name: &str, samples: Vec<f64>) {
        self.rows.push(Row {
            name: name.into(),
            baseline: true,
            value: Spread::new(samples),
            ratios: Vec::new(),
        });
    }

    /// A measured row, compared with the (already added) baselines named.
    pub fn measured(&mut self, name: &str, samples: Vec<f64>, against: &[&str]) {
        let value = Spread::new(samples);
        let ratios = against
            .iter()
            .filter_map(|b| self.rows.iter().find(|r| r.name == *b))
            .map(|b| Ratio::new(&b.name, &value, &b.value))
            .collect();
        self.rows.push(Row {
            name: name.into(),
            baseline: false,
            value,
            ratios,
        });
    }

    pub fn print(&self) {
        println!("\n{}\n", self.title);
        println!(
            "| measurement | {} median (min–max) | ratio to baseline |",
            self.unit
        );
        println!("|---|---|---|");
        for r in &self.rows {
            let ratio = if r.baseline {
                "baseline".to_owned()
            } else {
                r.ratios
                    .iter()
                    .map(Ratio::show)
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            println!("| {} | {} | {ratio} |", r.name, r.value.show(0));
        }
        for s in &self.skipped {
            println!("\nskipped: {s}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ratio_pairs_the_samples_of_each_repetition() {
        let mut s = Section::new("t", "tps");
        // The machine slows down over the run: the repetitions' ratios
        // are 0.45, 0.6 and 0.5; the medians' ratio would say 600 / 1000.
        s.baseline("alone", vec![2000.0, 1000.0, 400.0]);
        s.measured("with", vec![900.0, 600.0, 200.0], &["alone"]);
        let r = &s.rows[1].ratios[0];
        assert_eq!(r.per_rep, vec![0.45, 0.6, 0.5]);
        assert_eq!(r.ratio, 0.5);
        assert_eq!(r.show(), "0.50 (0.45–0.60) × alone");
    }

    #[test]
    fn rows_with_different_repetitions_divide_their_medians() {
        let mut s = Section::new("t", "tps");
        s.baseline("alone", vec![1000.0, 800.0]);
        s.measured("with", vec![450.0], &["alone"]);
        let r = &s.rows[1].ratios[0];
        assert!(r.per_rep.is_empty());
        assert_eq!(r.ratio, 0.5);
        assert_eq!(r.show(), "0.50 × alone");
    }
}
