//! Send → shown latency, like the seed's table: v1 (direct queue.add), v2
//! woken by NOTIFY, v2 by polling alone (1 s); percentiles per repetition and
//! a PNG histogram.

use crate::history::Msg;
use crate::world::{Options, World};
use std::time::{Duration, Instant};

#[derive(Clone, Copy, PartialEq, Eq)]
enum Variant {
    V1,
    Notify,
    Poll,
}

impl Variant {
    fn label(self) -> &'static str {
        match self {
            Variant::V1 => "v1: direct queue.add",
            Variant::Notify => "v2: outbox and NOTIFY",
            Variant::Poll => "v2: polling only, 1 s",
        }
    }
}

const CHAT: i64 = 2;

async fn measure(
    admin_url: &str,
    v: Variant,
    count: u32,
    every: Duration,
) -> Result<Vec<f64>, chat::Error> {
    let flags = if v == Variant::Poll {
        vec!["--poll-interval".to_owned(), "1s".to_owned()]
    } else {
        vec![]
    };
    let mut w = World::start(
        admin_url,
        Options {
            v2: v != Variant::V1,
            consumers_relays: 1,
            relay_flags: flags,
            redis_proxy: false,
            pg_proxy: false,
            db_hosts: None,
            ..Default::default()
        },
    )
    .await?;
    if v == Variant::Poll {
        sqlx::raw_sql(&format!(
            "DROP TRIGGER IF EXISTS outbox_notify ON {s}.outbox; DROP TRIGGER IF EXISTS outbox_notify_adaptive ON {s}.outbox",
            s = w.consumers.schema
        ))
        .execute(&w.admin)
        .await?;
    }
    w.consumers.start(&[]).await?;
    w.workers.start(&[]).await?;
    // Warm up connections and scripts (not measured).
    for n in 1..=3 {
        w.send(Msg { chat: 3, n }).await?;
    }
    w.converge(Duration::from_secs(30)).await?;
    let mut next = Instant::now();
    for n in 1..=count {
        tokio::time::sleep_until(next.into()).await;
        next += every;
        w.send(Msg { chat: CHAT, n }).await?;
    }
    w.converge(Duration::from_secs(30)).await?;
    let lat = w.history.latencies(CHAT);
    w.finish().await?;
    Ok(lat)
}

/// The `p`-th percentile (nearest rank) of `sorted`; NaN when empty.
pub fn pct(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((p / 100.0) * (sorted.len() - 1) as f64).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

pub async fn run(
    admin_url: &str,
    count: u32,
    every: Duration,
    reps: usize,
    png: &std::path::Path,
) -> Result<bool, chat::Error> {
    let variants = [Variant::V1, Variant::Notify, Variant::Poll];
    let mut all: Vec<(Variant, Vec<f64>)> = variants.iter().map(|v| (*v, Vec::new())).collect();
    println!(
        "send → shown latency, {count} messages, one every {every:?}, {reps} repetitions, {} cores",
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    println!();
    println!("| variant | rep | p50 ms | p95 ms | p99 ms | max ms | samples |");
    println!("|---|---|---|---|---|---|---|");
    let mut complete = true;
    for rep in 1..=reps {
        for (i, v) in variants.iter().enumerate() {
            let mut lat = measure(admin_url, *v, count, every).await?;
            lat.sort_by(|a, b| a.partial_cmp(b).unwrap());
            complete &= lat.len() == count as usize;
            println!(
                "| {} | {rep} | {:.1} | {:.1} | {:.1} | {:.1} | {} |",
                v.label(),
                pct(&lat, 50.0),
                pct(&lat, 95.0),
                pct(&lat, 99.0),
                lat.last().copied().unwrap_or(f64::NAN),
                lat.len()
            );
            all[i].1.extend(lat);
        }
    }
    match draw(png, &all) {
        Ok(()) => println!("\nhistogram: {}", png.display()),
        Err(e) => println!("\nno histogram drawn: {e}"),
    }
    Ok(complete)
}

/// One panel per variant: how many messages took how long.
fn draw(path: &std::path::Path, data: &[(Variant, Vec<f64>)]) -> Result<(), chat::Error> {
    use plotters::prelude::*;
    let font = [
        "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
        "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
    ]
    .iter()
    .find_map(|p| std::fs::read(p).ok())
    .ok_or("no TrueType font found (apt-get install fonts-dejavu-core)")?;
    plotters::style::register_font(
        "sans-serif",
        FontStyle::Normal,
        Box::leak(font.into_boxed_slice()),
    )
    .map_err(|_| "cannot load the font")?;
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let root = BitMapBackend::new(path, (900, 900)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let panels = root.split_evenly((data.len(), 1));
    for ((v, lat), area) in data.iter().zip(panels.iter()) {
        let mut sorted = lat.clone();
        sorted.sort_by(|a, b| a.partial_cmp(b).unwrap());
        let top = pct(&sorted, 99.0).max(1.0) * 1.15;
        let buckets = 40u32;
        let width = top / buckets as f64;
        let mut counts = vec![0u32; buckets as usize];
        for x in lat {
            let b = ((x / width) as usize).min(buckets as usize - 1);
            counts[b] += 1;
        }
        let ymax = counts.iter().copied().max().unwrap_or(1).max(1);
        let mut chart = ChartBuilder::on(area)
            .caption(
                format!(
                    "{} — p50 {:.1} ms, p99 {:.1} ms",
                    v.label(),
                    pct(&sorted, 50.0),
                    pct(&sorted, 99.0)
                ),
                ("sans-serif", 18),
            )
            .margin(10)
            .x_label_area_size(30)
            .y_label_area_size(40)
            .build_cartesian_2d(0u32..buckets, 0u32..ymax + 1)
            .map_err(|e| e.to_string())?;
        chart
            .configure_mesh()
            .disable_x_mesh()
            .x_desc("ms")
            .y_desc("messages")
            .x_label_formatter(&|b| format!("{:.0}", *b as f64 * width))
            .label_style(("sans-serif", 12))
            .draw()
            .map_err(|e| e.to_string())?;
        chart
            .draw_series(
                Histogram::vertical(&chart)
                    .style(BLUE.mix(0.6).filled())
                    .data(counts.iter().enumerate().map(|(i, c)| (i as u32, *c))),
            )
            .map_err(|e| e.to_string())?;
    }
    root.present().map_err(|e| e.to_string())?;
    Ok(())
}
