//! The figures of a bench run: Markdown tables on stdout ([`throughput`],
//! [`latency`]), the JSON file (`--json`, [`Report`]) and the chart (`--png`,
//! [`chart`]).

mod chart;
mod health;
mod latency;
mod sick_relay;
mod throughput;

pub use health::{HealthRow, HealthSection};
pub use latency::{LatencyRow, LatencySection};
pub use sick_relay::{SickRelayRow, SickRelaySection};
pub use throughput::{Ratio, Section, Spread};

use super::Ctx;
use crate::BenchError;
use serde::Serialize;
use std::path::Path;

/// Everything a run measured, as written to `--json`.
#[derive(Debug, Serialize)]
pub struct Report {
    pub timestamp: String,
    pub cores: usize,
    pub params: super::Params,
    pub drain: Option<Section>,
    pub latency: Option<LatencySection>,
    pub restart: Option<LatencySection>,
    pub sick_relay: Option<SickRelaySection>,
    pub replay: Option<LatencySection>,
    pub scheduled: Option<Section>,
    pub scheduled_lateness: Option<LatencySection>,
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
            sick_relay: None,
            replay: None,
            scheduled: None,
            scheduled_lateness: None,
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
}

fn create_parent(path: &Path) -> Result<(), BenchError> {
    match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => std::fs::create_dir_all(dir)
            .map_err(|e| format!("creating {}: {e}", dir.display()).into()),
        _ => Ok(()),
    }
}
