//! Scheduled events (`Event::deliver_at`): delivered at or after their time,
//! not before, through a relay restart, holding back none of their key's
//! events; cancelled from the library and the command line; bad input.

use crate::support::*;
use chrono::{DateTime, SubsecRound, Utc};
use postbox::{EnqueueError, InvalidEvent};
use std::time::Duration;

fn redis() -> String {
    postbox_testkit::redis_url()
}

async fn schedule(ctx: &Ctx, event: postbox::Event) -> postbox::Enqueued {
    let mut tx = ctx.pool.begin().await.unwrap();
    let done = ctx.outbox.enqueue(&mut tx, event).await.unwrap();
    tx.commit().await.unwrap();
    done
}

/// (created_at, sent_at) of the outbox row of `event_id`, once it has one.
async fn outbox_row(
    ctx: &Ctx,
    event_id: uuid::Uuid,
) -> Option<(DateTime<Utc>, Option<DateTime<Utc>>)> {
    sqlx::query_as(&format!(
        "SELECT created_at, sent_at FROM {}.outbox WHERE event_id = $1",
        ctx.schema
    ))
    .bind(event_id)
    .fetch_optional(&ctx.pool)
    .await
    .unwrap()
}

async fn waiting_scheduled(ctx: &Ctx) -> i64 {
    sqlx::query_scalar(&format!(
        "SELECT count(*) FROM {}.outbox_scheduled",
        ctx.schema
    ))
    .fetch_one(&ctx.pool)
    .await
    .unwrap()
}

/// Event 1 of key k is scheduled 2 s ahead, event 2 of k goes now: 2 is
/// delivered at once (a scheduled event holds nothing back), 1 when due and
/// not before, after 2 in the queue; its outbox row counts from its due time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scheduled_event_is_delivered_at_its_time_and_holds_back_no_one() {
    let ctx = Ctx::new("sched_time").await;
    // PostgreSQL keeps microseconds.
    let at = (Utc::now() + chrono::Duration::seconds(2)).trunc_subsecs(6);
    let later = schedule(&ctx, ctx.event("k", 1).deliver_at(at)).await;
    schedule(&ctx, ctx.event("k", 2)).await;
    let relay = ctx.relay(&redis(), &[], &[]);
    let view = RedisView::new(&redis(), &ctx.queue).await;
    wait_until(LONG, "the unscheduled event delivered", || async {
        view.wait_len().await == 1
    })
    .await;
    assert!(Utc::now() < at, "the test was too slow to see the order");
    assert!(
        outbox_row(&ctx, later.event_id).await.is_none(),
        "not before its time"
    );
    wait_until(LONG, "the scheduled event delivered", || async {
        view.wait_len().await == 2
    })
    .await;
    // The job is in the queue before the relay's claim commits (publish,
    // then COMMIT): wait for the row to show it sent.
    wait_until(LONG, "the scheduled event's row marked sent", || async {
        outbox_row(&ctx, later.event_id)
            .await
            .is_some_and(|(_, sent)| sent.is_some())
    })
    .await;
    let (created, sent) = outbox_row(&ctx, later.event_id).await.unwrap();
    assert_eq!(created, at, "its outbox row counts from its due time");
    assert!(sent.unwrap() >= at, "sent at {sent:?}, due {at}");
    let seen = view.waiting().await;
    let seqs: Vec<u64> = seen.iter().map(|s| s.2).collect();
    assert_eq!(seqs, [2, 1], "due later, delivered later: {seen:?}");
    assert_eq!(waiting_scheduled(&ctx).await, 0);
    drop(relay);
    ctx.cleanup().await;
}

/// Nothing waits only in memory: a relay killed before the time, and another
/// started after it, delivers the event; several due together keep the order
/// they were scheduled in.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scheduled_events_survive_a_relay_killed_before_their_time() {
    let ctx = Ctx::new("sched_kill").await;
    let at = Utc::now() + chrono::Duration::milliseconds(1500);
    for seq in 1..=5 {
        schedule(&ctx, ctx.event("k", seq).deliver_at(at)).await;
    }
    let mut doomed = ctx.relay(&redis(), &[], &[]);
    doomed.wait_for_line("relay started", LONG).await;
    doomed.signal("KILL");
    doomed.wait(LONG).await;
    assert_eq!(waiting_scheduled(&ctx).await, 5);
    tokio::time::sleep_until(tokio::time::Instant::now() + Duration::from_millis(1600)).await;
    let relay = ctx.relay(&redis(), &[], &[]);
    let view = RedisView::new(&redis(), &ctx.queue).await;
    wait_until(LONG, "all five delivered", || async {
        view.wait_len().await == 5
    })
    .await;
    let seqs: Vec<u64> = view.waiting().await.iter().map(|s| s.2).collect();
    assert_eq!(seqs, [1, 2, 3, 4, 5]);
    drop(relay);
    ctx.cleanup().await;
}

/// The library's `cancel` and `postbox scheduled cancel` take an event back
/// before its time; one of the same due time, not cancelled, is delivered
/// and the cancelled never is. Unknown ids cancel nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scheduled_event_is_cancelled_before_its_time() {
    let ctx = Ctx::new("sched_cancel").await;
    let at = Utc::now() + chrono::Duration::seconds(2);
    let a = schedule(&ctx, ctx.event("a", 1).deliver_at(at)).await;
    let b = schedule(&ctx, ctx.event("b", 1).deliver_at(at)).await;
    let c = schedule(&ctx, ctx.event("c", 1).deliver_at(at)).await;

    let mut tx = ctx.pool.begin().await.unwrap();
    assert!(ctx.outbox.cancel(&mut tx, a.event_id).await.unwrap());
    assert!(
        !ctx.outbox.cancel(&mut tx, a.event_id).await.unwrap(),
        "once"
    );
    tx.commit().await.unwrap();

    let s = ctx.schema.as_str();
    let (ok, status) = postbox(&["status", "--schemas", s]).await;
    assert!(
        ok && status.contains("scheduled: 2 waiting, the next due in"),
        "{status}"
    );
    let (ok, list) = postbox(&["scheduled", "list", "--schema", s]).await;
    assert!(ok, "{list}");
    assert!(
        list.contains(&b.event_id.to_string()) && list.contains(&c.event_id.to_string()),
        "{list}"
    );
    assert!(!list.contains(&a.event_id.to_string()), "{list}");
    // An unknown id beside a good one: nothing is cancelled.
    let unknown = uuid::Uuid::new_v4().to_string();
    let b_id = b.event_id.to_string();
    let (ok, out) = postbox(&[
        "scheduled",
        "cancel",
        "--schema",
        s,
        "--event-id",
        &b_id,
        "--event-id",
        &unknown,
    ])
    .await;
    assert!(
        !ok && out.contains(&unknown) && out.contains("nothing was cancelled"),
        "{out}"
    );
    assert_eq!(waiting_scheduled(&ctx).await, 2);
    let (ok, out) = postbox(&["scheduled", "cancel", "--schema", s, "--event-id", &b_id]).await;
    assert!(
        ok && out.contains("cancelled 1 scheduled event(s)"),
        "{out}"
    );

    let relay = ctx.relay(&redis(), &[], &[]);
    wait_until(LONG, "the event not cancelled delivered", || async {
        outbox_row(&ctx, c.event_id)
            .await
            .is_some_and(|r| r.1.is_some())
    })
    .await;
    // Moved in one transaction with everything due at that time: the
    // cancelled ones would be there now.
    assert!(outbox_row(&ctx, a.event_id).await.is_none());
    assert!(outbox_row(&ctx, b.event_id).await.is_none());
    assert_eq!(waiting_scheduled(&ctx).await, 0);
    let mut tx = ctx.pool.begin().await.unwrap();
    assert!(
        !ctx.outbox.cancel(&mut tx, c.event_id).await.unwrap(),
        "past cancelling once due"
    );
    tx.commit().await.unwrap();
    drop(relay);
    ctx.cleanup().await;
}

/// A time already past goes to the outbox now; one further than the
/// outbox's `max_delay` is refused with nothing written; a plain-SQL
/// producer schedules with an INSERT into `outbox_scheduled`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_far_and_sql_scheduled_events() {
    let ctx = Ctx::new("sched_bad").await;
    let past = schedule(
        &ctx,
        ctx.event("k", 1)
            .deliver_at(Utc::now() - chrono::Duration::seconds(5)),
    )
    .await;
    assert!(
        outbox_row(&ctx, past.event_id).await.is_some(),
        "a past time delivers now"
    );
    assert_eq!(waiting_scheduled(&ctx).await, 0);

    let mut tx = ctx.pool.begin().await.unwrap();
    let far = Utc::now() + chrono::Duration::days(400);
    let err = ctx
        .outbox
        .enqueue(&mut tx, ctx.event("k", 2).deliver_at(far))
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            EnqueueError::InvalidEvent(InvalidEvent::DeliverAtTooFar { max_days: 366, .. })
        ),
        "{err}"
    );
    assert!(
        err.to_string().contains("more than 366 days ahead"),
        "{err}"
    );
    let near = ctx.outbox.clone().max_delay(Duration::from_secs(60));
    let err = near
        .enqueue_many(
            &mut tx,
            vec![
                ctx.event("k", 3),
                ctx.event("k", 4)
                    .deliver_at(Utc::now() + chrono::Duration::hours(1)),
            ],
        )
        .await
        .unwrap_err();
    assert!(err.to_string().contains("index 1 of 2"), "{err}");
    tx.commit().await.unwrap();
    assert_eq!(waiting_scheduled(&ctx).await, 0, "nothing written");

    sqlx::query(&format!(
        "INSERT INTO {}.outbox_scheduled (topic, event, key, payload, deliver_at)
         VALUES ($1, 'test.event', 'sql', '{{\"key\": \"sql\", \"seq\": 1}}', now() + interval '300 milliseconds')",
        ctx.schema
    ))
    .bind(&ctx.queue)
    .execute(&ctx.pool)
    .await
    .unwrap();
    let relay = ctx.relay(&redis(), &[], &[]);
    let view = RedisView::new(&redis(), &ctx.queue).await;
    wait_until(LONG, "the SQL-scheduled event delivered", || async {
        view.wait_len().await == 2
    })
    .await;
    drop(relay);
    ctx.cleanup().await;
}

/// Three relays on one schema, 300 events due at once on a sink that keeps
/// duplicates (Redis Streams): one mover at a time, so each event enters the
/// outbox once and is delivered once, in the order scheduled per key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn several_relays_move_each_scheduled_event_once() {
    let ctx = Ctx::new("sched_many").await;
    let at = Utc::now() + chrono::Duration::milliseconds(1500);
    let events: Vec<postbox::Event> = (0..300)
        .map(|i| {
            ctx.event(&format!("k{}", i % 10), i / 10 + 1)
                .deliver_at(at)
        })
        .collect();
    let mut tx = ctx.pool.begin().await.unwrap();
    ctx.outbox.enqueue_many(&mut tx, events).await.unwrap();
    tx.commit().await.unwrap();
    assert_eq!(waiting_scheduled(&ctx).await, 300);
    let url = redis();
    let args = [
        "--sink",
        "redis_streams",
        "--redis-streams-url",
        url.as_str(),
    ];
    let relays: Vec<RelayProcess> = (0..3).map(|_| ctx.relay(&url, &args, &[])).collect();
    wait_until(LONG, "all moved and sent", || async {
        waiting_scheduled(&ctx).await == 0 && ctx.unsent().await == 0
    })
    .await;
    let rows: i64 = sqlx::query_scalar(&format!("SELECT count(*) FROM {}.outbox", ctx.schema))
        .fetch_one(&ctx.pool)
        .await
        .unwrap();
    assert_eq!(rows, 300, "each moved once");
    let mut redis = redis::Client::open(url.as_str())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let entries: Vec<(String, Vec<(String, String)>)> = redis::cmd("XRANGE")
        .arg(&ctx.queue)
        .arg("-")
        .arg("+")
        .query_async(&mut redis)
        .await
        .unwrap();
    assert_eq!(entries.len(), 300, "each delivered once");
    let mut seen = Vec::new();
    for (_, fields) in &entries {
        let field = |name: &str| {
            fields
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.clone())
                .unwrap()
        };
        let payload: serde_json::Value = serde_json::from_str(&field("payload")).unwrap();
        seen.push((
            String::new(),
            field("key"),
            payload["seq"].as_u64().unwrap(),
        ));
    }
    assert_per_key_order(&seen);
    let _: () = redis::cmd("DEL")
        .arg(&ctx.queue)
        .query_async(&mut redis)
        .await
        .unwrap();
    drop(relays);
    ctx.cleanup().await;
}
