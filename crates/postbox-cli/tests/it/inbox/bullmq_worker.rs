//! The BullMQ inbox worker: completed jobs expire, stranded jobs run first, an
//! idle worker stops promptly.

use super::*;

/// Completed jobs leave Redis after `keep_completed` (the relay adds each
/// with `removeOnComplete: { age }`, which the worker applies as it completes
/// jobs), so Redis does not keep every payload forever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn completed_jobs_leave_redis_after_keep_completed() {
    use postbox_bullmq::bullmq::{options::RedisConnectionOptions, WorkerOptions};
    use redis::AsyncCommands;
    let ctx = Ctx::new("keepdone").await;
    let redis = postbox_testkit::redis_url();
    sqlx::raw_sql(&format!(
        "CREATE TABLE {}.effects (job_id text)",
        ctx.schema
    ))
    .execute(&ctx.pool)
    .await
    .unwrap();
    let handler = std::sync::Arc::new(Effects {
        insert: format!("INSERT INTO {}.effects VALUES ($1)", ctx.schema),
        duplicates: Default::default(),
    });
    let worker = postbox_bullmq::inbox_worker(
        postbox::InboxConsumer::new(
            ctx.pool.clone(),
            Inbox::new(&ctx.schema).unwrap(),
            "effects",
        ),
        &ctx.queue,
        handler,
        WorkerOptions {
            connection: RedisConnectionOptions {
                url: redis.clone(),
                ..Default::default()
            },
            drain_delay: 1,
            ..Default::default()
        },
        tokio_util::sync::CancellationToken::new(),
    )
    .await
    .unwrap();
    let relay = ctx.relay(&redis, &["--bullmq-keep-completed", "1s"], &[]);
    ctx.produce((1..=5).map(|i| ctx.event("k", i)).collect())
        .await;
    let first: Vec<String> = sqlx::query_scalar(&format!(
        "SELECT event_id::text FROM {}.outbox ORDER BY id",
        ctx.schema
    ))
    .fetch_all(&ctx.pool)
    .await
    .unwrap();
    let mut r = redis::Client::open(redis.as_str())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let job = |id: &str| format!("bull:{}:{id}", ctx.queue);
    let done = format!("bull:{}:completed", ctx.queue);
    wait_until(LONG, "the first five jobs completed", || {
        let mut r = r.clone();
        let done = done.clone();
        async move { r.zcard::<_, usize>(&done).await.unwrap() == 5 }
    })
    .await;
    let opts: String = r.hget(job(&first[0]), "opts").await.unwrap();
    assert!(opts.contains("removeOnComplete"), "{opts}");
    // Each later completion evicts what is older than a second: while the
    // first jobs remain, one more event goes through.
    let mut seq = 5;
    wait_until(LONG, "the first five jobs gone from Redis", || {
        let (mut r, ids) = (
            r.clone(),
            first.iter().map(|id| job(id)).collect::<Vec<_>>(),
        );
        seq += 1;
        let next = ctx.event("k", seq);
        let ctx = &ctx;
        async move {
            if r.exists::<_, usize>(&ids).await.unwrap() == 0 {
                return true;
            }
            ctx.produce(vec![next]).await;
            false
        }
    })
    .await;
    worker.worker().close(5000).await.unwrap();
    drop(relay);
    ctx.cleanup().await;
}

/// A job the worker fetched without hearing back (Redis killed after the AOF
/// write, the reply lost on a cut connection) runs before the worker's next
/// job, not after it once its lock expires; so does a job whose owner's lock
/// expired. A job another live worker holds is left to it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stranded_jobs_run_before_the_next_one() {
    use postbox_bullmq::bullmq::{
        options::RedisConnectionOptions, types::JobState, Queue, QueueOptions, WorkerOptions,
    };
    use redis::AsyncCommands;
    let ctx = Ctx::new("inboxstrand").await;
    let redis_url = postbox_testkit::redis_url();
    sqlx::raw_sql(&format!(
        "CREATE TABLE {}.effects (seq bigserial, job_id text)",
        ctx.schema
    ))
    .execute(&ctx.pool)
    .await
    .unwrap();
    let handler = std::sync::Arc::new(Effects {
        insert: format!("INSERT INTO {}.effects (job_id) VALUES ($1)", ctx.schema),
        duplicates: Default::default(),
    });
    let conn = RedisConnectionOptions {
        url: redis_url.clone(),
        ..Default::default()
    };
    let queue = Queue::with_options(
        &ctx.queue,
        QueueOptions {
            connection: conn.clone(),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    for id in ["a", "b", "c", "d"] {
        queue
            .add("chat.message", serde_json::json!({ "id": id }))
            .job_id(id)
            .await
            .unwrap();
    }
    let worker = postbox_bullmq::inbox_worker(
        postbox::InboxConsumer::new(
            ctx.pool.clone(),
            Inbox::new(&ctx.schema).unwrap(),
            "effects",
        ),
        &ctx.queue,
        handler.clone(),
        WorkerOptions {
            connection: conn,
            drain_delay: 1,
            lock_duration: 2000,
            stalled_interval: 1000,
            autorun: false,
            ..Default::default()
        },
        tokio_util::sync::CancellationToken::new(),
    )
    .await
    .unwrap();
    let w = worker.worker();
    // "a": fetched by this worker, the reply lost (its lock names this worker).
    let a = w.get_next_job(&format!("{}:lost", w.id())).await.unwrap();
    assert_eq!(a.unwrap().id(), "a");
    // "b": fetched by a worker that died, whose lock expired.
    let b = w.get_next_job("dead-worker:1").await.unwrap();
    assert_eq!(b.unwrap().id(), "b");
    let mut r = redis::Client::open(redis_url)
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let _: () = r.del(format!("bull:{}:b:lock", ctx.queue)).await.unwrap();
    // "c": held by another live worker.
    let c = w.get_next_job("live-worker:1").await.unwrap();
    assert_eq!(c.unwrap().id(), "c");
    w.run().await.unwrap();

    let effects = || async {
        sqlx::query_scalar::<_, String>(&format!(
            "SELECT job_id FROM {}.effects ORDER BY seq",
            ctx.schema
        ))
        .fetch_all(&ctx.pool)
        .await
        .unwrap()
    };
    wait_until(LONG, "four effects", || async {
        effects().await.len() == 4
    })
    .await;
    // "c" waited for its owner's lock to expire and the stalled check to return it.
    assert_eq!(effects().await, ["a", "b", "d", "c"]);
    // The stalled check returns "a" and "b" too: the inbox completes them as duplicates.
    wait_until(LONG, "every job completed", || async {
        let mut done = 0;
        for id in ["a", "b", "c", "d"] {
            if queue.get_job_state(id).await.unwrap() == JobState::Completed {
                done += 1;
            }
        }
        done == 4
    })
    .await;
    assert_eq!(
        handler.duplicates.load(std::sync::atomic::Ordering::SeqCst),
        2
    );
    assert_eq!(effects().await.len(), 4, "each effect ran once");
    w.close(5000).await.unwrap();
    ctx.cleanup().await;
}

/// An idle BullMQ inbox worker built from `worker_options` stops within
/// about a second of its shutdown: its blocking fetch (`drain_delay`) ends
/// within a second, where BullMQ's default (5 s) held the close that long.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_bullmq_inbox_worker_stops_within_two_seconds() {
    struct Nothing;
    impl postbox::Handler for Nothing {
        async fn handle(
            &self,
            _tx: &mut sqlx::PgConnection,
            _msg: &postbox::Message,
        ) -> Result<(), postbox::BoxError> {
            Ok(())
        }
    }
    let ctx = Ctx::new("idleclose").await;
    let stop = tokio_util::sync::CancellationToken::new();
    let worker = postbox_bullmq::inbox_worker(
        postbox::InboxConsumer::new(ctx.pool.clone(), Inbox::new(&ctx.schema).unwrap(), "idle"),
        &ctx.queue,
        Nothing,
        postbox_bullmq::worker_options(&postbox_testkit::redis_url()),
        stop.clone(),
    )
    .await
    .unwrap();
    let running = tokio::spawn(worker.run());
    // The worker has reached its blocking wait on the empty queue: bullmq
    // lists its named connection for this queue, in BZPOPMIN.
    let queue = postbox_bullmq::bullmq::Queue::with_options(
        &ctx.queue,
        postbox_bullmq::bullmq::QueueOptions {
            connection: postbox_bullmq::bullmq::options::RedisConnectionOptions {
                url: postbox_testkit::redis_url(),
                ..Default::default()
            },
            ..Default::default()
        },
    )
    .await
    .unwrap();
    wait_until(LONG, "the idle worker's blocking fetch", || async {
        let workers = queue.get_workers().await.unwrap();
        workers
            .iter()
            .any(|w| w.get("cmd").map(String::as_str) == Some("bzpopmin"))
    })
    .await;
    let asked = std::time::Instant::now();
    stop.cancel();
    tokio::time::timeout(std::time::Duration::from_secs(10), running)
        .await
        .expect("the worker stops")
        .unwrap()
        .unwrap();
    let took = asked.elapsed();
    assert!(
        took < std::time::Duration::from_secs(2),
        "an idle worker took {took:?} to stop (BullMQ's drain_delay?)"
    );
    ctx.cleanup().await;
}
