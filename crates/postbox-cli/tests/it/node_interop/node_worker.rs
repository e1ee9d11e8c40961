//! A Node `Worker` processes the jobs the relay published: names, data of
//! every shape, per-key order, and Node's own counts.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_worker_processes_relayed_jobs() {
    require_node_modules();
    let ctx = Ctx::new("node_a").await;
    const N: usize = 50;
    let keys = ["alice", "bob", "carol", "dave", "ëve-ünïcode"];
    let names = ["order.created", "order.paid", "событие.обновлено"];
    let events: Vec<Event> = (0..N)
        .map(|i| {
            let key = keys[i % keys.len()];
            Event::new(&ctx.queue, names[i % names.len()], payload(key, i)).key(key)
        })
        .collect();
    ctx.produce(events).await;

    let relay = ctx.relay(&postbox_testkit::redis_url(), &[], &[]);
    let c = &ctx;
    wait_until(WAIT, "relay to publish every event", move || async move {
        c.unsent().await == 0
    })
    .await;

    // Node's own view of the queue before consuming.
    let counts = node_counts(&ctx.queue).await;
    assert_eq!(
        count_of(&counts, "waiting"),
        N as u64,
        "Queue.getJobCounts(): {counts}"
    );
    assert_eq!(count_of(&counts, "failed"), 0, "{counts}");

    let consumed = node_consume(&ctx.queue, N).await;
    assert_eq!(consumed.len(), N);

    let rows: Vec<(String, String, Value)> = sqlx::query_as(&format!(
        "SELECT event_id::text, event, payload FROM {}.outbox ORDER BY id",
        ctx.schema
    ))
    .fetch_all(&ctx.pool)
    .await
    .unwrap();
    assert_eq!(rows.len(), N);
    let by_id: HashMap<&str, (&str, &Value)> = rows
        .iter()
        .map(|(id, ev, p)| (id.as_str(), (ev.as_str(), p)))
        .collect();

    let mut seen = Vec::new();
    let mut ids = std::collections::HashSet::new();
    for job in &consumed {
        let id = job["id"]
            .as_str()
            .unwrap_or_else(|| panic!("job id is not a string: {job}"));
        assert!(ids.insert(id), "job {id} processed twice");
        let (event, payload) = by_id
            .get(id)
            .unwrap_or_else(|| panic!("Node processed job {id}, which is no outbox event_id"));
        assert_eq!(job["name"], json!(event), "job {id}: name");
        // The payload's fields untouched, the key beside them under `_postbox`.
        let mut data = job["data"].clone();
        let meta = data.as_object_mut().unwrap().remove("_postbox");
        assert_eq!(&data, *payload, "job {id}: data");
        assert_eq!(meta, Some(json!({"key": payload["key"]})), "job {id}: key");
        seen.push((
            id.to_owned(),
            job["data"]["key"].as_str().unwrap().to_owned(),
            job["data"]["seq"].as_u64().unwrap(),
        ));
    }
    assert_per_key_order(&seen);

    let counts = node_counts(&ctx.queue).await;
    assert_eq!(
        count_of(&counts, "completed"),
        N as u64,
        "Queue.getJobCounts(): {counts}"
    );
    assert_eq!(count_of(&counts, "waiting"), 0, "{counts}");
    assert_eq!(count_of(&counts, "active"), 0, "{counts}");
    assert_eq!(count_of(&counts, "failed"), 0, "{counts}");

    drop(relay);
    ctx.cleanup().await;
}
