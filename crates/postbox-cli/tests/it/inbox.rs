//! The inbox: Fresh once, Duplicate after; the Rust worker skips redeliveries.

use crate::support::*;
use futures::FutureExt;
use postbox::{Inbox, Receipt};

#[tokio::test]
async fn receive_is_fresh_once_then_duplicate() {
    let ctx = Ctx::new("inbox").await;
    let inbox = Inbox::new(&ctx.schema).unwrap();
    let mut tx = ctx.pool.begin().await.unwrap();
    assert_eq!(
        inbox.receive(&mut tx, "c1", "m1").await.unwrap(),
        Receipt::Fresh
    );
    tx.commit().await.unwrap();

    let mut tx = ctx.pool.begin().await.unwrap();
    assert_eq!(
        inbox.receive(&mut tx, "c1", "m1").await.unwrap(),
        Receipt::Duplicate
    );
    // Another consumer has its own inbox rows.
    assert_eq!(
        inbox.receive(&mut tx, "c2", "m1").await.unwrap(),
        Receipt::Fresh
    );
    tx.rollback().await.unwrap();

    // A rolled-back receive leaves no trace: the message is fresh again.
    let mut tx = ctx.pool.begin().await.unwrap();
    assert_eq!(
        inbox.receive(&mut tx, "c2", "m1").await.unwrap(),
        Receipt::Fresh
    );
    tx.commit().await.unwrap();

    // Concurrent receivers of one message: exactly one is Fresh.
    let mut a = ctx.pool.begin().await.unwrap();
    assert_eq!(
        inbox.receive(&mut a, "c3", "m9").await.unwrap(),
        Receipt::Fresh
    );
    let (pool, inbox2) = (ctx.pool.clone(), inbox.clone());
    let b = tokio::spawn(async move {
        let mut b = pool.begin().await.unwrap();
        let r = inbox2.receive(&mut b, "c3", "m9").await.unwrap();
        b.commit().await.unwrap();
        r
    });
    a.commit().await.unwrap();
    assert_eq!(b.await.unwrap(), Receipt::Duplicate);
    ctx.cleanup().await;
}

struct Effects {
    insert: String,
    duplicates: std::sync::atomic::AtomicUsize,
}

impl postbox_bullmq::Handler for Effects {
    async fn handle(
        &self,
        tx: &mut sqlx::PgConnection,
        job: &postbox_bullmq::Message,
    ) -> Result<(), postbox_bullmq::BoxError> {
        sqlx::query(&self.insert).bind(&job.id).execute(tx).await?;
        Ok(())
    }
    async fn on_duplicate(&self, _job: &postbox_bullmq::Message) {
        self.duplicates
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inbox_worker_runs_the_effect_once_per_event() {
    use postbox_bullmq::bullmq::{
        options::RedisConnectionOptions, Queue, QueueOptions, WorkerOptions,
    };
    let ctx = Ctx::new("inboxw").await;
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
    let conn = RedisConnectionOptions {
        url: redis.clone(),
        ..Default::default()
    };
    let worker = postbox_bullmq::inbox_worker(
        postbox::InboxConsumer::new(
            ctx.pool.clone(),
            Inbox::new(&ctx.schema).unwrap(),
            "effects",
        ),
        &ctx.queue,
        handler.clone(),
        WorkerOptions {
            connection: conn.clone(),
            drain_delay: 1,
            ..Default::default()
        },
        tokio_util::sync::CancellationToken::new(),
    )
    .await
    .unwrap();
    let relay = ctx.relay(&redis, &["--poll-interval", "100ms"], &[]);
    ctx.produce((1..=3).map(|i| ctx.event("k", i)).collect())
        .await;
    let effects = |pool: sqlx::PgPool, schema: String| async move {
        sqlx::query_scalar::<_, i64>(&format!("SELECT count(*) FROM {schema}.effects"))
            .fetch_one(&pool)
            .await
            .unwrap()
    };
    wait_until(LONG, "three effects", || {
        effects(ctx.pool.clone(), ctx.schema.clone()).map(|n| n == 3)
    })
    .await;

    // BullMQ dropped a completed job, then the relay republished its event
    // (a crash between publish and mark): the job really arrives again.
    let (id, event_id): (i64, String) = sqlx::query_as(&format!(
        "SELECT id, event_id::text FROM {}.outbox ORDER BY id LIMIT 1",
        ctx.schema
    ))
    .fetch_one(&ctx.pool)
    .await
    .unwrap();
    let queue = Queue::with_options(
        &ctx.queue,
        QueueOptions {
            connection: conn,
            ..Default::default()
        },
    )
    .await
    .unwrap();
    assert!(queue.remove(&event_id).await.unwrap());
    sqlx::query(&format!(
        "UPDATE {}.outbox SET sent_at = NULL, xid = pg_current_xact_id() WHERE id = $1",
        ctx.schema
    ))
    .bind(id)
    .execute(&ctx.pool)
    .await
    .unwrap();
    wait_until(LONG, "the redelivery to be skipped", || {
        let n = handler.duplicates.load(std::sync::atomic::Ordering::SeqCst);
        async move { n == 1 }
    })
    .await;
    assert_eq!(
        effects(ctx.pool.clone(), ctx.schema.clone()).await,
        3,
        "effect ran once per event"
    );
    worker.worker().close(5000).await.unwrap();
    drop(relay);
    ctx.cleanup().await;
}

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

struct NoEffect;

impl postbox::Handler for NoEffect {
    async fn handle(
        &self,
        _: &mut sqlx::PgConnection,
        _: &postbox::Message,
    ) -> Result<(), postbox::BoxError> {
        Ok(())
    }
}

/// A read-only database (a standby after a failover, maintenance, a full
/// disk) is the database's trouble: the inbox loop retries it and never hands
/// it to the broker as the message's failure (BullMQ would fail the job).
#[tokio::test]
async fn a_read_only_database_is_retried_not_blamed_on_the_message() {
    let ctx = Ctx::new("inboxro").await;
    let opts: sqlx::postgres::PgConnectOptions = postbox_testkit::database_url().parse().unwrap();
    let read_only = sqlx::postgres::PgPoolOptions::new()
        .max_connections(1)
        .connect_with(opts.options([("default_transaction_read_only", "on")]))
        .await
        .unwrap();
    let consumer = postbox::InboxConsumer::new(read_only, Inbox::new(&ctx.schema).unwrap(), "c")
        .patience(std::time::Duration::from_millis(300));
    let shutdown = tokio_util::sync::CancellationToken::new();
    let m1 = postbox::Message::new("m1", "t");
    match consumer.process(&m1, &NoEffect, &shutdown).await {
        Err(e @ postbox::ConsumeError::Database { .. }) => {
            assert!(e.is_transient());
            assert!(e.to_string().contains("read-only"), "{e}");
        }
        other => panic!("expected a transient database error, got {other:?}"),
    }
    // Writable again: the same message goes through once.
    let consumer =
        postbox::InboxConsumer::new(ctx.pool.clone(), Inbox::new(&ctx.schema).unwrap(), "c");
    assert_eq!(
        consumer.process(&m1, &NoEffect, &shutdown).await.unwrap(),
        postbox::Processed::Fresh
    );
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
