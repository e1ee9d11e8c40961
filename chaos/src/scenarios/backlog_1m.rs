//! `backlog-1m`: the consumers relay is stopped while a million events pile
//! up in the outbox (a topic nobody consumes, written with plain SQL in
//! batches), and the chats go on meanwhile; then a relay with its admin
//! endpoint starts on the backlog. Sampled every 250 ms while it drains:
//! the relay's resident memory (it must stay flat: nothing of the backlog is
//! held in memory beyond one batch per worker) and the pending gauge it
//! exports (the lag an operator's alert would watch).

use super::{Run, Scenario};
use crate::infra::free_port;
use crate::world::World;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

pub struct Backlog1m;

#[async_trait::async_trait]
impl Scenario for Backlog1m {
    fn name(&self) -> &'static str {
        "backlog-1m"
    }

    fn about(&self) -> &'static str {
        "the consumers relay stopped while 1,000,000 events pile up in the outbox; a new relay drains them with its resident memory flat and the pending gauge showing the lag, and the chats come through"
    }

    async fn faults(&self, run: &mut Run) -> Result<(), chat::Error> {
        run.at(0.5).await;
        let port = pile_up(&mut run.w).await?;
        run.ok &= watch_drain(&run.w, port, Duration::from_secs(900)).await?;
        Ok(())
    }
}

const EVENTS: i64 = 1_000_000;
const CHUNK: i64 = 100_000;
/// Growth of resident memory allowed after the first tenth has drained.
const FLAT_MB: f64 = 24.0;

/// Stop the consumers relay, write the backlog, start the observed relay.
/// Returns the relay's admin port.
async fn pile_up(w: &mut World) -> Result<u16, chat::Error> {
    let h = w.history.clone();
    w.consumers.relays[0].stop().await?;
    h.harness("relay", "consumers relay stopped");
    let started = Instant::now();
    for from in (0..EVENTS).step_by(CHUNK as usize) {
        sqlx::query(&format!(
            "INSERT INTO {s}.outbox (topic, event, key, payload)
             SELECT 'backlog', 'backlog.filled', 'k' || (i % 1000), jsonb_build_object('n', i)
               FROM generate_series($1::bigint, $2::bigint) i",
            s = w.consumers.schema
        ))
        .bind(from)
        .bind(from + CHUNK - 1)
        .execute(&w.admin)
        .await?;
    }
    h.harness(
        "producer",
        format!(
            "{EVENTS} backlog events written in {:.1?}",
            started.elapsed()
        ),
    );
    let port = free_port();
    let flags = [
        "--admin-listen".to_owned(),
        format!("127.0.0.1:{port}"),
        "--stats-interval".into(),
        "1s".into(),
    ];
    let mut relay = w.new_consumers_relay("relay(consumers, backlog)", &flags);
    relay.start(&[])?;
    w.consumers.relays[0] = relay;
    h.harness("relay", "relay started on the backlog");
    Ok(port)
}

/// Sample until the outbox is empty (or `timeout`); print the figures.
/// True if memory stayed flat and the gauge followed the drain.
async fn watch_drain(w: &World, port: u16, timeout: Duration) -> Result<bool, chat::Error> {
    let pid = w.consumers.relays[0]
        .pid()
        .ok_or("backlog relay not running")?;
    let started = Instant::now();
    let mut samples: Vec<(f64, i64, f64, Option<f64>)> = Vec::new(); // (s, unsent, rss MB, gauge)
    loop {
        let unsent = w.unsent().await?.unwrap_or(0);
        let rss = rss_mb(pid).unwrap_or(f64::NAN);
        let gauge = pending_gauge(port).await;
        samples.push((started.elapsed().as_secs_f64(), unsent, rss, gauge));
        if unsent == 0 || started.elapsed() > timeout {
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let drained = started.elapsed().as_secs_f64();
    let unsent = samples.last().map_or(0, |s| s.1);
    let at = |frac: f64| {
        samples
            .iter()
            .find(|s| (s.1 as f64) <= EVENTS as f64 * (1.0 - frac))
            .map_or(f64::NAN, |s| s.2)
    };
    let (tenth, half) = (at(0.1), at(0.5));
    let profile: Vec<String> = [0.1, 0.25, 0.5, 0.75, 0.9, 1.0]
        .iter()
        .map(|f| format!("{:.0}% {:.1}", f * 100.0, at(*f)))
        .collect();
    let (peak, peak_left) = samples
        .iter()
        .fold((0.0, 0), |m, s| if s.2 > m.0 { (s.2, s.1) } else { m });
    let gauge_peak = samples.iter().filter_map(|s| s.3).fold(0.0, f64::max);
    let gauge_seen = samples.iter().filter(|s| s.3.is_some()).count();
    println!(
        "backlog: {EVENTS} events drained in {drained:.1} s ({:.0}/s); relay RSS {tenth:.1} MB at 10% drained, {half:.1} MB at 50%, peak {peak:.1} MB (allowed: +{FLAT_MB} MB over the 10% figure); postbox_schema_pending_events peaked at {gauge_peak:.0} ({gauge_seen} of {} samples had it)",
        EVENTS as f64 / drained,
        samples.len()
    );
    println!(
        "relay RSS (MB) by share drained: {}; the peak at {:.0}% drained",
        profile.join(", "),
        100.0 * (1.0 - peak_left as f64 / EVENTS as f64)
    );
    let flat = peak <= tenth + FLAT_MB;
    let gauge_ok = gauge_peak >= EVENTS as f64 * 0.5;
    Ok(unsent == 0 && flat && gauge_ok)
}

/// Resident set size of `pid` in MB (Linux).
fn rss_mb(pid: u32) -> Option<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kb: f64 = status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()?;
    Some(kb / 1024.0)
}

/// `postbox_schema_pending_events` from the relay's `/metrics` (summed over schemas).
async fn pending_gauge(port: u16) -> Option<f64> {
    let get = async {
        let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .ok()?;
        s.write_all(b"GET /metrics HTTP/1.0\r\nHost: relay\r\n\r\n")
            .await
            .ok()?;
        let mut body = String::new();
        s.read_to_string(&mut body).await.ok()?;
        let values: Vec<f64> = body
            .lines()
            .filter(|l| l.starts_with("postbox_schema_pending_events"))
            .filter_map(|l| l.rsplit(' ').next()?.parse().ok())
            .collect();
        (!values.is_empty()).then(|| values.iter().sum())
    };
    tokio::time::timeout(Duration::from_secs(1), get)
        .await
        .ok()?
}
