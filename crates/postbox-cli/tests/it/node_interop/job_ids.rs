//! A job id added twice, by the relay again or by Node, is one job.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn duplicate_job_id_exists_once() {
    require_node_modules();
    let ctx = Ctx::new("node_c").await;
    let event_id = uuid::Uuid::new_v4();
    let id = event_id.to_string();
    let data = json!({"order": 7, "note": "published twice, exists once ✓"});
    ctx.produce(vec![Event::new(&ctx.queue, "order.created", data.clone())
        .key("order:7")
        .event_id(event_id)])
        .await;

    // The reset below fires no NOTIFY: poll often so the relay finds it soon.
    let relay = ctx.relay(
        &postbox_testkit::redis_url(),
        &["--poll-interval", "100ms"],
        &[],
    );
    let sent_sql = &format!(
        "SELECT sent_at IS NOT NULL FROM {}.outbox WHERE event_id = $1",
        ctx.schema
    );
    let pool = &ctx.pool;
    let is_sent = move || async move {
        sqlx::query_scalar::<_, bool>(sent_sql)
            .bind(event_id)
            .fetch_one(pool)
            .await
            .unwrap()
    };
    wait_until(WAIT, "relay to publish the event", is_sent).await;

    let view = RedisView::new(&postbox_testkit::redis_url(), &ctx.queue).await;
    assert_eq!(view.waiting_ids().await, vec![id.clone()]);
    let duplicated = |events: &[(String, String)]| {
        events
            .iter()
            .filter(|(e, j)| e == "duplicated" && *j == id)
            .count()
    };
    assert_eq!(duplicated(&queue_events(&ctx.queue).await), 0);

    // A relay that crashed after publishing but before marking the row sent:
    // the row is published again on restart.
    sqlx::query(&format!(
        "UPDATE {}.outbox SET sent_at = NULL, xid = pg_current_xact_id() WHERE event_id = $1",
        ctx.schema
    ))
    .bind(event_id)
    .execute(&ctx.pool)
    .await
    .unwrap();
    wait_until(WAIT, "relay to publish the reset event again", is_sent).await;
    // BullMQ logs the second add of an existing jobId as `duplicated`.
    assert_eq!(
        duplicated(&queue_events(&ctx.queue).await),
        1,
        "the relay re-added the job"
    );
    assert_eq!(
        view.waiting_ids().await,
        vec![id.clone()],
        "one job for the id"
    );
    // The payload's fields, and beside them the key under `_postbox`.
    let mut job_data = data.clone();
    job_data["_postbox"] = json!({"key": "order:7"});
    assert_eq!(view.data(&id).await, job_data);
    drop(relay);

    // Node's queue.add of the same jobId: the existing job, still one.
    let (ids, counts) = node_produce(
        &ctx.queue,
        &json!([{"name": "order.created", "data": {"from": "node"}, "jobId": id}]),
    )
    .await;
    assert_eq!(ids, vec![id.clone()]);
    assert_eq!(
        count_of(&counts, "waiting"),
        1,
        "Queue.getJobCounts(): {counts}"
    );
    assert_eq!(duplicated(&queue_events(&ctx.queue).await), 2);
    assert_eq!(view.waiting_ids().await, vec![id.clone()]);
    assert_eq!(view.data(&id).await, job_data, "the first add's data stays");
    assert_eq!(view.name(&id).await, "order.created");

    ctx.cleanup().await;
}
