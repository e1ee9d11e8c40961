//! The drain benchmark's raw BullMQ rates: the jobs the relay would add,
//! without PostgreSQL, as concurrent single adds and as one transaction per
//! batch (what the sink's `publish = "transaction"` sends).

use super::{BODY, EVENT};
use crate::BenchError;
use crate::{cpu, Ctx};
use postbox_bullmq::bullmq::{BulkJob, FlowJob, FlowProducer, FlowProducerOptions, JobOptions};
use std::future::Future;
use std::sync::Arc;

/// The same jobs the relay would add (event id as job id, same name and
/// data), in batches of the relay's size, as many batches in flight as the
/// relay has workers, each batch through `Queue::add_bulk` (one script call
/// per job, not atomic): what Redis and BullMQ's script take without PostgreSQL.
pub async fn raw_rate(ctx: &Ctx, queue: &str) -> Result<cpu::Measured, BenchError> {
    let q = Arc::new(ctx.queue(queue).await?);
    let lanes = lanes(ctx, |n| {
        BulkJob::new(EVENT, serde_json::json!({ "n": n, "body": BODY }))
            .job_id(uuid::Uuid::new_v4().to_string())
    });
    timed(ctx, lanes, move |batch| {
        let q = q.clone();
        async move { q.add_bulk(batch).await.map(drop) }
    })
    .await
}

/// The same jobs, each batch as one MULTI/EXEC through
/// `FlowProducer::add_bulk`, over one connection as the sink does: the
/// transaction's own cost, without PostgreSQL.
pub async fn raw_transaction_rate(ctx: &Ctx, queue: &str) -> Result<cpu::Measured, BenchError> {
    let flow = Arc::new(
        FlowProducer::with_options(FlowProducerOptions {
            connection: ctx.redis(),
            ..Default::default()
        })
        .await?,
    );
    let lanes = lanes(ctx, |n| FlowJob {
        name: EVENT.into(),
        queue_name: queue.into(),
        data: serde_json::json!({ "n": n, "body": BODY }),
        opts: Some(JobOptions {
            job_id: Some(uuid::Uuid::new_v4().to_string()),
            ..Default::default()
        }),
        prefix: None,
        children: None,
    });
    timed(ctx, lanes, move |batch| {
        let flow = flow.clone();
        async move { flow.add_bulk(batch).await.map(drop) }
    })
    .await
}

/// Send every lane's batches in turn, the lanes at once; the rate of all
/// `--events` from the first send to the last reply.
async fn timed<J, F, Fut>(
    ctx: &Ctx,
    lanes: Vec<Vec<Vec<J>>>,
    send: F,
) -> Result<cpu::Measured, BenchError>
where
    J: Send + 'static,
    F: Fn(Vec<J>) -> Fut + Clone + Send + 'static,
    Fut: Future<Output = Result<(), postbox_bullmq::bullmq::Error>> + Send,
{
    let started = cpu::Window::start();
    let tasks = lanes.into_iter().map(|lane| {
        let send = send.clone();
        tokio::spawn(async move {
            for batch in lane {
                send(batch).await?;
            }
            Ok::<_, postbox_bullmq::bullmq::Error>(())
        })
    });
    for t in futures::future::join_all(tasks).await {
        t??;
    }
    Ok(started.finish(ctx.p.events as u64))
}

/// `--events` jobs made by `job`, cut in batches of the relay's size and dealt
/// round-robin to one lane per relay worker. Built before the clock starts.
fn lanes<J>(ctx: &Ctx, job: impl Fn(i64) -> J) -> Vec<Vec<Vec<J>>> {
    let p = &ctx.p;
    let mut lanes: Vec<Vec<Vec<J>>> = (0..p.relay.workers).map(|_| Vec::new()).collect();
    let mut jobs = (1..=p.events).map(job).peekable();
    let mut i = 0;
    while jobs.peek().is_some() {
        lanes[i % p.relay.workers].push(jobs.by_ref().take(p.relay.batch_size as usize).collect());
        i += 1;
    }
    lanes
}
