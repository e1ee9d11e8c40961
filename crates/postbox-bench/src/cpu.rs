//! Where the CPU went during a timed window: the whole machine's busy cores
//! (`/proc/stat`) and each program's share (`/proc/<pid>/stat`, grouped by
//! command name: this process, `postgres`, `redis-server`, …). On a machine
//! whose cores are all busy, the drain rate is bound by the CPU every event
//! costs across the programs, not by any one of them; this line shows it.
//! A process that exits inside the window takes its CPU time with it: keep
//! connections open until the window is read. Linux only: elsewhere the line
//! says the figures are missing.

use std::collections::HashMap;
use std::fmt;
use std::time::{Duration, Instant};

/// A timed window started with [`Window::start`].
pub struct Window {
    started: Instant,
    machine: Option<MachineTicks>,
    programs: HashMap<u32, (String, u64)>,
    unit: &'static str,
}

/// Clock ticks of all CPUs together: (busy, total).
type MachineTicks = (u64, u64);

/// A rate and where the CPU went while it was measured.
pub struct Measured {
    pub rate: f64,
    pub cpu: CpuUse,
}

/// What a window measured.
pub struct CpuUse {
    pub elapsed: Duration,
    /// Busy cores on average over the window, and the machine's core count.
    machine: Option<(f64, usize)>,
    /// Cores used on average, per program, largest first; "this process" first.
    programs: Vec<(String, f64)>,
    /// CPU time per item, all programs together (µs).
    per_item_us: Option<f64>,
    unit: &'static str,
}

impl Window {
    pub fn start() -> Self {
        Window {
            machine: machine_ticks(),
            programs: program_ticks(),
            started: Instant::now(),
            unit: "event",
        }
    }

    /// Name what an item is in the "CPU per …" figure ("event" unless told).
    pub fn per(self, unit: &'static str) -> Self {
        Window { unit, ..self }
    }

    /// Items per second since the start, and where the CPU went.
    pub fn finish(&self, items: u64) -> Measured {
        let cpu = self.stop(items);
        Measured {
            rate: items as f64 / cpu.elapsed.as_secs_f64(),
            cpu,
        }
    }

    pub fn stop(&self, items: u64) -> CpuUse {
        let elapsed = self.started.elapsed();
        let (end_machine, end_programs) = (machine_ticks(), program_ticks());
        let secs = elapsed.as_secs_f64().max(1e-9);
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let machine = match (self.machine, end_machine) {
            (Some((b0, t0)), Some((b1, t1))) if t1 > t0 => {
                // Share of all CPUs' ticks that were busy, in cores.
                Some(((b1 - b0) as f64 / (t1 - t0) as f64 * cores as f64, cores))
            }
            _ => None,
        };
        let me = std::process::id();
        let mut by_name: HashMap<String, u64> = HashMap::new();
        for (pid, (name, ticks)) in &end_programs {
            // A kernel worker's name changes with its current work queue
            // ("kworker/u8:0-writeback"): match by pid and group them all.
            let before = match self.programs.get(pid) {
                Some((_, t)) if t <= ticks => *t,
                _ => 0,
            };
            let name = match name {
                _ if *pid == me => "this process".to_owned(),
                n if n.starts_with("kworker/") => "kernel workers".to_owned(),
                n => n.clone(),
            };
            *by_name.entry(name).or_default() += ticks - before;
        }
        let mut programs: Vec<(String, f64)> = by_name
            .into_iter()
            .map(|(n, t)| (n, t as f64 / TICKS_PER_SECOND / secs))
            .filter(|(n, c)| *c >= 0.02 || n == "this process")
            .collect();
        programs.sort_by(|a, b| {
            (b.0 == "this process")
                .cmp(&(a.0 == "this process"))
                .then(b.1.total_cmp(&a.1))
        });
        let per_item_us = machine
            .filter(|_| items > 0)
            .map(|(busy, _)| busy * secs / items as f64 * 1e6);
        CpuUse {
            elapsed,
            machine,
            programs,
            per_item_us,
            unit: self.unit,
        }
    }
}

impl fmt::Display for CpuUse {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Some((busy, cores)) = self.machine else {
            return write!(f, "cpu: not measured (no /proc/stat)");
        };
        write!(f, "cpu: {busy:.2} of {cores} cores busy (")?;
        for (i, (name, c)) in self.programs.iter().take(5).enumerate() {
            write!(f, "{}{name} {c:.2}", if i > 0 { ", " } else { "" })?;
        }
        write!(f, ")")?;
        if let Some(us) = self.per_item_us {
            write!(f, ", {us:.1} µs of CPU per {}", self.unit)?;
        }
        Ok(())
    }
}

/// USER_HZ: the unit of `/proc` CPU times; 100 on every Linux architecture
/// that matters here.
const TICKS_PER_SECOND: f64 = 100.0;

fn machine_ticks() -> Option<MachineTicks> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let line = stat.lines().find(|l| l.starts_with("cpu "))?;
    let v: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|x| x.parse().ok())
        .collect();
    // user nice system idle iowait irq softirq steal (guest is inside user).
    let total: u64 = v.iter().take(8).sum();
    let idle = v.get(3).copied().unwrap_or(0) + v.get(4).copied().unwrap_or(0);
    Some((total - idle, total))
}

/// Every process's command name and user+system ticks so far.
fn program_ticks() -> HashMap<u32, (String, u64)> {
    let mut out = HashMap::new();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return out;
    };
    for entry in dir.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        if let Some(t) = std::fs::read_to_string(entry.path().join("stat"))
            .ok()
            .and_then(|s| parse_stat(&s))
        {
            out.insert(pid, t);
        }
    }
    out
}

/// (comm, utime + stime) from a `/proc/<pid>/stat` line. The name is in
/// parentheses and may itself hold spaces or parentheses: split at the last ')'.
fn parse_stat(line: &str) -> Option<(String, u64)> {
    let open = line.find('(')?;
    let close = line.rfind(')')?;
    let name = line.get(open + 1..close)?.to_owned();
    let rest: Vec<&str> = line.get(close + 2..)?.split_whitespace().collect();
    // Fields after the name start at field 3 (state); utime is field 14, stime 15.
    let utime: u64 = rest.get(11)?.parse().ok()?;
    let stime: u64 = rest.get(12)?.parse().ok()?;
    Some((name, utime + stime))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_a_stat_line_whose_name_has_spaces_and_parentheses() {
        let line = "4242 (postgres: a (b)) S 1 4242 4242 0 -1 4194560 300 0 0 0 17 5 0 0 20 0 1 0 100 1000 10";
        assert_eq!(parse_stat(line), Some(("postgres: a (b)".into(), 22)));
    }

    #[test]
    fn a_window_sees_this_process_spend_cpu() {
        let w = Window::start();
        let mut x = 0u64;
        let until = Instant::now() + Duration::from_millis(200);
        while Instant::now() < until {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
        }
        std::hint::black_box(x);
        let used = w.stop(1000);
        let me = used.programs.iter().find(|(n, _)| n == "this process");
        assert!(me.is_some_and(|(_, c)| *c > 0.0), "{used}");
        assert!(used.to_string().contains("this process"), "{used}");
    }
}
