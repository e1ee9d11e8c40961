//! The drain benchmark's raw BullMQ rate.

use super::{BODY, EVENT};
use crate::bench::Ctx;
use crate::CliError;
use postbox_bullmq::bullmq::BulkJob;
use std::sync::Arc;
use std::time::Instant;

/// The same jobs the relay would add (event id as job id, same name and
/// data), in batches of the relay's size, as many batches in flight as the
/// relay has workers: what Redis and BullMQ's script take without PostgreSQL.
pub async fn raw_rate(ctx: &Ctx, queue: &str) -> Result<f64, CliError> {
    let p = &ctx.p;
    let q = Arc::new(ctx.queue(queue).await?);
    let jobs: Vec<BulkJob> = (1..=p.events)
        .map(|n| {
            BulkJob::new(EVENT, serde_json::json!({ "n": n, "body": BODY }))
                .job_id(uuid::Uuid::new_v4().to_string())
        })
        .collect();
    let mut batches: Vec<Vec<BulkJob>> = Vec::new();
    let mut jobs = jobs.into_iter().peekable();
    while jobs.peek().is_some() {
        batches.push(jobs.by_ref().take(p.batch_size as usize).collect());
    }
    let started = Instant::now();
    let mut lanes: Vec<Vec<Vec<BulkJob>>> = (0..p.workers).map(|_| Vec::new()).collect();
    for (i, b) in batches.into_iter().enumerate() {
        lanes[i % p.workers].push(b);
    }
    let tasks = lanes.into_iter().map(|lane| {
        let q = q.clone();
        tokio::spawn(async move {
            for batch in lane {
                q.add_bulk(batch).await?;
            }
            Ok::<_, postbox_bullmq::bullmq::Error>(())
        })
    });
    for t in futures::future::join_all(tasks).await {
        t??;
    }
    Ok(p.events as f64 / started.elapsed().as_secs_f64())
}
