//! The figures of a bench run: Markdown tables on stdout, the JSON file
//! (`--json`) and the chart (`--png`).

use super::Ctx;
use crate::BenchError;
use serde::Serialize;
use std::path::Path;

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
    pub(super) fn show(&self, decimals: usize) -> String {
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
    pub(super) fn new(to: &str, row: &Spread, baseline: &Spread) -> Ratio {
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
    pub(super) fn show(&self) -> String {
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
        println!(
            "| variant | msg/s | p50 | p95 | p99 | max | received | p50 ratio to {} |",
            self.ratio_to
        );
        println!("|---|---|---|---|---|---|---|---|");
        for r in &self.rows {
            println!(
                "| {} | {} | {} | {} | {} | {} | {}/{} | {} |",
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

/// One table-health sample.
#[derive(Debug, Clone, Serialize)]
pub struct HealthRow {
    pub elapsed_s: f64,
    pub produced: u64,
    pub total_bytes: i64,
    pub index_bytes: i64,
    pub live_rows: i64,
    pub dead_rows: i64,
    pub unsent: i64,
    /// Autovacuum runs on the outbox so far.
    pub autovacuums: i64,
    /// Redis's `used_memory` (the whole server's).
    pub redis_used_bytes: u64,
    /// Completed jobs of the queue BullMQ keeps (`bullmq.keep_completed`).
    pub completed_kept: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct HealthSection {
    pub rate: u64,
    pub retention_s: u64,
    /// The server's `autovacuum` setting: with it off, dead rows are never reclaimed.
    pub autovacuum: String,
    pub rows: Vec<HealthRow>,
}

/// Everything a run measured, as written to `--json`.
#[derive(Debug, Serialize)]
pub struct Report {
    pub timestamp: String,
    pub cores: usize,
    pub params: super::Params,
    pub drain: Option<Section>,
    pub latency: Option<LatencySection>,
    pub restart: Option<LatencySection>,
    pub load: Option<super::load::LoadSection>,
    pub producer: Option<Section>,
    pub consumer: Option<Section>,
    pub health: Option<HealthSection>,
}

impl Report {
    pub fn new(ctx: &Ctx) -> Report {
        Report {
            timestamp: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
            cores: ctx.cores,
            params: ctx.p.clone(),
            drain: None,
            latency: None,
            restart: None,
            load: None,
            producer: None,
            consumer: None,
            health: None,
        }
    }

    pub fn write_json(&self, path: &Path) -> Result<(), BenchError> {
        create_parent(path)?;
        let text = serde_json::to_string_pretty(self)?;
        std::fs::write(path, text + "\n")
            .map_err(|e| format!("writing {}: {e}", path.display()))?;
        Ok(())
    }

    /// Latency percentiles per variant and rate (log scale), then one panel
    /// per throughput section with its baselines in grey.
    pub fn draw(&self, path: &Path) -> Result<(), BenchError> {
        use plotters::prelude::*;
        create_parent(path)?;
        register_font()?;
        let sections: Vec<&Section> = [&self.drain, &self.producer, &self.consumer]
            .into_iter()
            .flatten()
            .collect();
        let panels = sections.len() + usize::from(self.latency.is_some());
        if panels == 0 {
            return Err("--png: nothing to draw (the health benchmark has no chart)".into());
        }
        let root = BitMapBackend::new(path, (1000, 360 * panels as u32)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| e.to_string())?;
        let areas = root.split_evenly((panels, 1));
        let mut areas = areas.iter();
        if let Some(l) = &self.latency {
            draw_latency(areas.next().unwrap(), l, self.cores)?;
        }
        for (s, area) in sections.into_iter().zip(areas) {
            draw_section(area, s, self.cores)?;
        }
        root.present()
            .map_err(|e| format!("writing {}: {e}", path.display()))?;
        Ok(())
    }
}

fn create_parent(path: &Path) -> Result<(), BenchError> {
    match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => std::fs::create_dir_all(dir)
            .map_err(|e| format!("creating {}: {e}", dir.display()).into()),
        _ => Ok(()),
    }
}

/// plotters draws text with a TrueType font it is given (no system font lookup).
fn register_font() -> Result<(), BenchError> {
    const FONTS: [&str; 2] = [
        "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
        "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
    ];
    let Some(bytes) = FONTS.iter().find_map(|p| std::fs::read(p).ok()) else {
        return Err("--png needs a TrueType font (apt-get install fonts-dejavu-core)".into());
    };
    plotters::style::register_font(
        "sans-serif",
        plotters::style::FontStyle::Normal,
        Box::leak(bytes.into_boxed_slice()),
    )
    .map_err(|_| "--png: cannot load the font".into())
}

type Area<'a> =
    plotters::drawing::DrawingArea<plotters::backend::BitMapBackend<'a>, plotters::coord::Shift>;

/// Horizontal bars, one a row: median bar, min–max whisker below the label inside.
fn draw_section(area: &Area, s: &Section, cores: usize) -> Result<(), BenchError> {
    use plotters::prelude::*;
    let top = s.rows.iter().map(|r| r.value.max).fold(1.0, f64::max) * 1.1;
    let n = s.rows.len().max(1) as f64;
    let mut chart = ChartBuilder::on(area)
        .caption(format!("{} ({cores} cores)", s.title), ("sans-serif", 18))
        .margin(10)
        .x_label_area_size(30)
        .build_cartesian_2d(0f64..top, 0f64..n)
        .map_err(|e| e.to_string())?;
    chart
        .configure_mesh()
        .disable_y_mesh()
        .disable_y_axis()
        .x_desc(s.unit.as_str())
        .x_label_formatter(&|v| format!("{v:.0}"))
        .label_style(("sans-serif", 12))
        .draw()
        .map_err(|e| e.to_string())?;
    for (i, r) in s.rows.iter().enumerate() {
        let y = n - 1.0 - i as f64;
        let color = if r.baseline {
            RGBColor(160, 160, 160)
        } else {
            BLUE
        };
        let ratio: String = r
            .ratios
            .iter()
            .map(|x| format!(", {:.2} × {}", x.ratio, x.to))
            .collect();
        chart
            .draw_series([
                Rectangle::new(
                    [(0.0, y + 0.15), (r.value.median, y + 0.85)],
                    color.mix(0.5).filled(),
                ),
                Rectangle::new(
                    [(r.value.min, y + 0.2), (r.value.max, y + 0.24)],
                    BLACK.filled(),
                ),
            ])
            .map_err(|e| e.to_string())?;
        chart
            .draw_series([Text::new(
                format!("{}: {:.0}{ratio}", r.name, r.value.median),
                (top * 0.01, y + 0.7),
                ("sans-serif", 13),
            )])
            .map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// p50, p95 and p99 bars per variant and rate, on a log scale (polling is
/// hundreds of times slower than a NOTIFY wake-up).
fn draw_latency(area: &Area, l: &LatencySection, cores: usize) -> Result<(), BenchError> {
    use plotters::prelude::*;
    let top = l.rows.iter().map(|r| r.p99_ms.max).fold(10.0, f64::max) * 2.0;
    let n = l.rows.len().max(1) as f64;
    let mut chart = ChartBuilder::on(area)
        .caption(
            format!("Latency, producer commit → inbox commit ({cores} cores): p50 (blue), p95 (orange), p99 (red)"),
            ("sans-serif", 18),
        )
        .margin(10)
        .x_label_area_size(30)
        .build_cartesian_2d((0.1f64..top).log_scale(), 0f64..n)
        .map_err(|e| e.to_string())?;
    chart
        .configure_mesh()
        .disable_y_mesh()
        .disable_y_axis()
        .x_desc("ms (log scale)")
        .label_style(("sans-serif", 12))
        .draw()
        .map_err(|e| e.to_string())?;
    let colors = [
        RGBColor(40, 120, 200),
        RGBColor(240, 160, 40),
        RGBColor(200, 50, 50),
    ];
    for (i, r) in l.rows.iter().enumerate() {
        let y = n - 1.0 - i as f64;
        let values = [&r.p50_ms, &r.p95_ms, &r.p99_ms];
        for (k, (v, c)) in values.iter().zip(colors).enumerate() {
            let y0 = y + 0.1 + 0.27 * k as f64;
            chart
                .draw_series([Rectangle::new(
                    [(0.1, y0), (v.median.max(0.1), y0 + 0.25)],
                    c.mix(0.6).filled(),
                )])
                .map_err(|e| e.to_string())?;
        }
        chart
            .draw_series([Text::new(
                format!(
                    "{} @ {}/s: {:.1} / {:.1} / {:.1} ms",
                    r.variant, r.rate, r.p50_ms.median, r.p95_ms.median, r.p99_ms.median
                ),
                (0.12, y + 0.45),
                ("sans-serif", 12),
            )])
            .map_err(|e| e.to_string())?;
    }
    Ok(())
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
