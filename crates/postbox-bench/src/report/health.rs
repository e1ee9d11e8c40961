//! The table-health benchmark's samples, for the JSON report.

use serde::Serialize;

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
