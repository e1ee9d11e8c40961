//! The broker crate's inbox consumer applies each message once: across its
//! own crash, a relay's re-send, and a PostgreSQL crash.

use super::*;
use postbox::{BoxError, CancellationToken, InboxConsumer};
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::Arc;

/// The crash tests' start: `<schema>.effects`, `n` events of key "k" with
/// their trace context, a relay, and everything sent.
async fn consumer_test<F: ConsumerFixture>(n: usize) -> (Ctx, F, RelayProcess, InboxConsumer) {
    let ctx = Ctx::new(F::NAME).await;
    let fx = F::start(&ctx.queue, Broker::Shared).await;
    fx.create_topic(&ctx.queue).await;
    ctx.effects_table().await;
    ctx.produce(
        (1..=n)
            .map(|i| ctx.event("k", i).traceparent(traceparent(i)))
            .collect(),
    )
    .await;
    let relay = relay(&ctx, &fx, &[], &[]);
    all_sent(&ctx, &[&relay]).await;
    let inbox = InboxConsumer::new(
        ctx.pool.clone(),
        postbox::Inbox::new(&ctx.schema).unwrap(),
        "effects",
    );
    (ctx, fx, relay, inbox)
}

/// A consumer dies between its inbox commit of the fifth message and its
/// acknowledgement; ten more events are published; a second consumer
/// applies every effect once with its trace context, skips the redelivery,
/// and (where the broker keeps order for a consumer) in order.
pub async fn inbox_consumer_applies_each_message_once_across_a_crash<F: ConsumerFixture>() {
    let (ctx, fx, relay, inbox) = consumer_test::<F>(20).await;
    let fifth = ctx.nth_event_id(5).await;
    let first = Effects::new(&ctx.schema, Some(fifth));
    let task = tokio::spawn(fx.consume(&ctx.queue, consumer(&inbox, &first, 1, &stop())));
    tokio::time::timeout(LONG, first.hung.notified())
        .await
        .expect("the first consumer reached the 5th message");
    task.abort();
    let _ = task.await;
    // A consumer that had been handed messages 6-20 would leave them
    // waiting (out an ack wait, a visibility timeout) while these take effect.
    ctx.produce(
        (21..=30)
            .map(|i| ctx.event("k", i).traceparent(traceparent(i)))
            .collect(),
    )
    .await;
    all_sent(&ctx, &[&relay]).await;
    let second = Effects::new(&ctx.schema, None);
    let stop = stop();
    let consume = fx.consume(&ctx.queue, consumer(&inbox, &second, 2, &stop));
    recovers_once(&ctx, &second, 30, Some("k"), &stop, consume).await;
    let traced: i64 = sqlx::query_scalar(&format!(
        "SELECT count(*) FROM {0}.effects e JOIN {0}.outbox o ON o.event_id::text = e.message_id
          WHERE e.traceparent = o.headers->>'traceparent'",
        ctx.schema
    ))
    .fetch_one(&ctx.pool)
    .await
    .unwrap();
    assert_eq!(traced, 30, "the handler saw each event's trace context");
    if F::KEEPS_ORDER {
        let rows = rows(&ctx).await;
        let applied: Vec<String> = sqlx::query_scalar(&format!(
            "SELECT message_id FROM {}.effects ORDER BY n",
            ctx.schema
        ))
        .fetch_all(&ctx.pool)
        .await
        .unwrap();
        let order: Vec<i64> = applied.iter().map(|id| rows[id].seq).collect();
        assert_eq!(order, (1..=30).collect::<Vec<_>>(), "effects in order");
    }
    drop(relay);
    fx.cleanup().await;
    ctx.cleanup().await;
}

/// A relay dies between publishing a batch and committing it; the next
/// sends the batch again. The consumer applies each of the ten effects once:
/// the broker dropped the re-sends, or the inbox skips all ten.
pub async fn inbox_consumer_skips_the_re_send_of_a_relay_killed_before_its_commit<
    F: ConsumerFixture,
>() {
    let ctx = Ctx::new(F::NAME).await;
    let fx = F::start(&ctx.queue, Broker::Shared).await;
    fx.create_topic(&ctx.queue).await;
    ctx.effects_table().await;
    ctx.produce((1..=10).map(|i| ctx.event("k", i)).collect())
        .await;
    let failpoint = [("POSTBOX_FAILPOINT", "after_publish")];
    let mut doomed = relay(&ctx, &fx, &["--workers", "1"], &failpoint);
    doomed.wait_for_line("failpoint after_publish", LONG).await;
    doomed.signal("KILL");
    doomed.wait(LONG).await;
    assert_eq!(ctx.unsent().await, 10, "published, not committed");
    let relay = relay(&ctx, &fx, &[], &[]);
    all_sent(&ctx, &[&relay]).await;

    let effects = Effects::new(&ctx.schema, None);
    let stop = stop();
    let inbox = InboxConsumer::new(
        ctx.pool.clone(),
        postbox::Inbox::new(&ctx.schema).unwrap(),
        "effects",
    );
    let re_sent = if F::DROPS_RESENDS { 0 } else { 10 };
    let judge = async {
        wait_until(LONG, "every effect, the re-sends skipped", || async {
            ctx.effects().await == 10 && effects.duplicates() >= re_sent
        })
        .await;
        stop.cancel();
    };
    let consume = fx.consume(&ctx.queue, consumer(&inbox, &effects, 1, &stop));
    let (consumed, ()) = tokio::join!(consume, judge);
    consumed.unwrap();
    assert_eq!(ctx.distinct_effects().await, 10, "each effect once");
    assert_eq!(
        effects.duplicates(),
        re_sent,
        "re-sends that reached the inbox"
    );
    drop(relay);
    fx.cleanup().await;
    ctx.cleanup().await;
}

/// Inserts each message's effect; holds the `hold_at`-th handled message
/// inside its transaction until the test has crashed PostgreSQL.
struct HeldEffects {
    insert: String,
    handled: AtomicUsize,
    hold_at: usize,
    holding: tokio::sync::Notify,
    release: tokio::sync::Notify,
}

impl Handler for HeldEffects {
    async fn handle(
        &self,
        tx: &mut sqlx::PgConnection,
        msg: &postbox::Message,
    ) -> Result<(), BoxError> {
        sqlx::query(&self.insert)
            .bind(&msg.id)
            .execute(&mut *tx)
            .await?;
        if self.handled.fetch_add(1, SeqCst) + 1 == self.hold_at {
            self.holding.notify_one();
            self.release.notified().await;
        }
        Ok(())
    }
}

/// The consumer's PostgreSQL (a cluster of the test's own) is crashed
/// while the 12th of 30 messages is inside its transaction, and comes back:
/// the consumer keeps running and applies each message once.
pub async fn inbox_consumer_survives_a_postgresql_crash<F: ConsumerFixture>() {
    let (ctx, fx, relay, _) = consumer_test::<F>(30).await;
    let pg = postbox_testkit::PgCluster::start().await.unwrap();
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(2)
        .acquire_timeout(Duration::from_secs(2))
        .connect(&pg.url())
        .await
        .unwrap();
    let schema = postbox::SchemaName::new("consumer_side").unwrap();
    let mut conn = pool.acquire().await.unwrap();
    postbox::migrate::run(&mut conn, &schema, Default::default())
        .await
        .unwrap();
    drop(conn);
    sqlx::raw_sql("CREATE TABLE consumer_side.effects (message_id text NOT NULL)")
        .execute(&pool)
        .await
        .unwrap();
    let effects = Arc::new(HeldEffects {
        insert: "INSERT INTO consumer_side.effects VALUES ($1)".into(),
        handled: AtomicUsize::new(0),
        hold_at: 12,
        holding: tokio::sync::Notify::new(),
        release: tokio::sync::Notify::new(),
    });
    let inbox = InboxConsumer::new(
        pool.clone(),
        postbox::Inbox::new("consumer_side").unwrap(),
        "effects",
    );
    let stop = stop();
    let task = tokio::spawn(fx.consume(&ctx.queue, consumer(&inbox, &effects, 1, &stop)));
    // The 12th message is inside its transaction: crash the server under it,
    // so its COMMIT fails and the following messages find no database.
    tokio::time::timeout(LONG, effects.holding.notified())
        .await
        .expect("the consumer reached the 12th message");
    pg.stop_immediate().await.unwrap();
    effects.release.notify_one();
    pg.up().await.unwrap();
    let count = |sql: &'static str| {
        let pool = pool.clone();
        async move {
            sqlx::query_scalar::<_, i64>(sql)
                .fetch_one(&pool)
                .await
                .unwrap_or(-1)
        }
    };
    wait_until(LONG, "all 30 effects committed", || async {
        count("SELECT count(DISTINCT message_id) FROM consumer_side.effects").await == 30
    })
    .await;
    assert_eq!(
        count("SELECT count(*) FROM consumer_side.effects").await,
        30,
        "no effect applied twice"
    );
    assert!(
        !task.is_finished(),
        "the consumer kept running through the outage"
    );
    stop.cancel();
    task.await.unwrap().unwrap();
    drop(relay);
    fx.cleanup().await;
    ctx.cleanup().await;
}

/// A consumer on a schema nobody migrated refuses at start, naming the
/// command to run, and takes nothing: before the fix it took messages and
/// failed each one in its transaction.
pub async fn inbox_consumer_refuses_an_unmigrated_schema<F: ConsumerFixture>() {
    let ctx = Ctx::new(F::NAME).await;
    let fx = F::start(&ctx.queue, Broker::Shared).await;
    fx.create_topic(&ctx.queue).await;
    let missing = format!("{}_none", ctx.schema);
    let inbox = InboxConsumer::new(
        ctx.pool.clone(),
        postbox::Inbox::new(&missing).unwrap(),
        "effects",
    );
    let effects = Effects::new(&ctx.schema, None);
    let refused = tokio::time::timeout(
        LONG,
        fx.consume(&ctx.queue, consumer(&inbox, &effects, 1, &stop())),
    )
    .await
    .expect("refused at start")
    .expect_err("an unmigrated schema is refused");
    let text = refused.to_string();
    assert!(
        text.contains(&format!("postbox migrate --schema {missing}")),
        "{text}"
    );
    fx.cleanup().await;
    ctx.cleanup().await;
}

fn stop() -> CancellationToken {
    CancellationToken::new()
}

fn consumer<H>(
    inbox: &InboxConsumer,
    h: &Arc<H>,
    n: usize,
    stop: &CancellationToken,
) -> Consume<H> {
    Consume {
        inbox: inbox.clone(),
        handler: h.clone(),
        n,
        stop: stop.clone(),
    }
}
