//! The inbox: Fresh once, Duplicate after; the Rust worker skips redeliveries.

use crate::support::*;
use futures::FutureExt;
use postbox::{Inbox, Receipt};

mod bullmq_worker;

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
