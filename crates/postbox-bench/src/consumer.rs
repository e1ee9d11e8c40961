//! Consumer throughput: `postbox_bullmq::inbox_worker` (each job recorded in
//! the inbox in its own transaction) over pre-filled jobs, jobs/s per worker
//! concurrency, next to the same `bullmq` Worker with a no-op handler and no
//! database.

use super::report::Section;
use super::{warm, Ctx, InboxOnly};
use crate::BenchError;
use postbox::migrate::WakeUp;
use postbox::Inbox;
use postbox_bullmq::bullmq::worker::CancellationToken as JobToken;
use postbox_bullmq::bullmq::{BulkJob, Job, Queue, Worker};
use postbox_bullmq::inbox_worker;
use sqlx::postgres::PgPoolOptions;
use std::time::{Duration, Instant};

pub async fn run(ctx: &Ctx) -> Result<Section, BenchError> {
    let p = &ctx.p;
    println!(
        "Consumer throughput: {} jobs per run, concurrency {:?}, {} cores",
        p.jobs, p.concurrency, ctx.cores
    );
    let mut noop = vec![Vec::new(); p.concurrency.len()];
    let mut inbox = vec![Vec::new(); p.concurrency.len()];
    for rep in 1..=p.reps {
        for (i, c) in p.concurrency.iter().enumerate() {
            let r = measure(ctx, *c, false, &format!("{rep}-{c}")).await?;
            println!("  rep {rep}: no-op worker, concurrency {c:<3}  {r:>8.0} jobs/s");
            noop[i].push(r);
            let r = measure(ctx, *c, true, &format!("{rep}-{c}")).await?;
            println!("  rep {rep}: inbox worker, concurrency {c:<3}  {r:>8.0} jobs/s");
            inbox[i].push(r);
        }
    }
    let mut s = Section::new(
        &format!("Consumer throughput: {} pre-filled jobs", p.jobs),
        "jobs/s",
    );
    for (i, c) in p.concurrency.iter().enumerate() {
        let base = format!("no-op worker, no database, concurrency {c}");
        s.baseline(&base, noop[i].clone());
        s.measured(
            &format!("inbox worker, concurrency {c}"),
            inbox[i].clone(),
            &[&base],
        );
    }
    s.print();
    Ok(s)
}

/// Fill a queue, start the worker, time until every job is completed.
async fn measure(
    ctx: &Ctx,
    concurrency: usize,
    with_inbox: bool,
    what: &str,
) -> Result<f64, BenchError> {
    let p = &ctx.p;
    let queue = ctx.queue_name(&format!(
        "consumer-{what}-{}",
        if with_inbox { "inbox" } else { "noop" }
    ));
    let q = ctx.queue(&queue).await?;
    fill(&q, p.jobs).await?;
    let schema = ctx.schema("consumer", WakeUp::Off).await?;
    let pool = PgPoolOptions::new()
        .max_connections(concurrency as u32 + 2)
        .connect(&p.database_url)
        .await?;
    warm(&pool, concurrency).await?;
    let opts = ctx.worker_options(concurrency);
    let started = Instant::now();
    // The inbox worker runs as a service runs it (`run` until shutdown); the
    // plain worker is closed directly.
    let shutdown = tokio_util::sync::CancellationToken::new();
    let (inbox_w, plain_w) = if with_inbox {
        let inbox = Inbox::new(schema.as_str())?;
        let w = inbox_worker(
            postbox::InboxConsumer::new(pool.clone(), inbox, "bench"),
            &queue,
            InboxOnly(|_: &postbox::Message| {}),
            opts,
            shutdown.clone(),
        )
        .await?
        .close_timeout(Duration::from_millis(100));
        (Some(tokio::spawn(w.run())), None)
    } else {
        let noop = |_job: Job, _token: JobToken| async { Ok(serde_json::Value::Null) };
        (None, Some(Worker::with_options(&queue, noop, opts).await?))
    };
    // Completed jobs as BullMQ counts them: the same finish line for both workers.
    let limit = Duration::from_secs(60) + Duration::from_millis(20 * p.jobs as u64);
    loop {
        let done = q.get_completed_count().await?;
        if done >= p.jobs as u64 {
            break;
        }
        if started.elapsed() > limit {
            return Err(format!(
                "consumer benchmark: {done} of {} jobs completed after {limit:?}",
                p.jobs
            )
            .into());
        }
        let pause = Duration::from_millis(10);
        match &plain_w {
            // Its events, which the inbox worker's `run` takes: the same work for both.
            Some(w) => {
                let _ =
                    tokio::time::timeout(pause, async { while w.next_event().await.is_some() {} })
                        .await;
            }
            None => tokio::time::sleep(pause).await,
        }
    }
    let rate = p.jobs as f64 / started.elapsed().as_secs_f64();
    shutdown.cancel();
    match (inbox_w, plain_w) {
        (Some(w), _) => w.await??,
        (_, Some(w)) => w.close(100).await?,
        _ => {}
    }
    pool.close().await;
    ctx.obliterate(&queue).await?;
    ctx.drop_schema(&schema).await?;
    Ok(rate)
}

/// `jobs` jobs shaped like the relay's (event id as job id), added in batches.
async fn fill(q: &Queue, jobs: usize) -> Result<(), BenchError> {
    let all: Vec<usize> = (0..jobs).collect();
    for chunk in all.chunks(1000) {
        let batch = chunk
            .iter()
            .map(|n| {
                BulkJob::new(
                    "bench.event",
                    serde_json::json!({ "n": n, "body": "hello from the bench" }),
                )
                .job_id(uuid::Uuid::new_v4().to_string())
            })
            .collect();
        q.add_bulk(batch).await?;
    }
    Ok(())
}
