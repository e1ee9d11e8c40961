//! The chart (`--png`): latency percentiles on a log scale, then one panel
//! per throughput section with its baselines in grey.

use super::{create_parent, LatencySection, Report, Section};
use crate::BenchError;
use std::path::Path;

impl Report {
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
