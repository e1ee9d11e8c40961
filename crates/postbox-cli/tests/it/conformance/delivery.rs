//! Every event arrives, with its fields and in key order, through relay
//! kills; headers arrive as text, a malformed trace context dropped.

use super::*;
use postbox::Event;

/// 1,000 events over 16 keys (fewer where the broker is slow), each with its
/// trace context, committed 50 to a transaction; two relays, one SIGKILLed
/// mid-stream and a third started: every event read back with its fields,
/// first occurrences in key order, and each exactly once where the broker
/// drops re-sends.
pub async fn events_arrive_once_and_in_key_order_through_relay_kills<F: BrokerFixture>() {
    let ctx = Ctx::new(F::NAME).await;
    let fx = F::start(&ctx.queue, Broker::Shared).await;
    fx.create_topic(&ctx.queue).await;
    let n = F::KILL_EVENTS;
    let events: Vec<Event> = (0..n)
        .map(|i| {
            ctx.event(&format!("k{}", i % 16), i / 16 + 1)
                .traceparent(traceparent(i))
        })
        .collect();
    for chunk in events.chunks(50) {
        let mut tx = ctx.pool.begin().await.unwrap();
        ctx.outbox
            .enqueue_many(&mut tx, chunk.to_vec())
            .await
            .unwrap();
        tx.commit().await.unwrap();
    }
    let mut doomed = relay(&ctx, &fx, F::KILL_FLAGS, &[]);
    let r2 = relay(&ctx, &fx, F::KILL_FLAGS, &[]);
    wait_until(LONG, "some events relayed", || async {
        ctx.unsent().await < (n as i64) * 3 / 4
    })
    .await;
    doomed.signal("KILL");
    doomed.wait(LONG).await;
    let r3 = relay(&ctx, &fx, F::KILL_FLAGS, &[]);
    all_sent(&ctx, &[&r2, &r3]).await;

    let seen = fx.read(&ctx.queue, n).await;
    let rows = rows(&ctx).await;
    let mut first = FirstOccurrences::default();
    for m in &seen {
        let row = rows
            .get(&m.id)
            .expect("the message's id is an outbox event id");
        check(&fx, m, row);
        first.see(&m.id, &row.key, row.seq);
    }
    assert_eq!(first.distinct(), n, "every event at least once");
    if F::DROPS_RESENDS {
        assert_eq!(seen.len(), n, "the broker dropped the relays' re-sends");
    }
    println!(
        "{} order/kill: {n} events, {} messages read, {} duplicates",
        F::NAME,
        seen.len(),
        seen.len() - n
    );
    drop((r2, r3));
    fx.cleanup().await;
    ctx.cleanup().await;
}

/// A plain-SQL producer's malformed `traceparent` is not checked at enqueue:
/// the relay drops it (and its `tracestate`), says so, and delivers the
/// event with its other headers as text.
pub async fn headers_arrive_as_text_and_a_malformed_trace_context_is_dropped<F: BrokerFixture>() {
    let ctx = Ctx::new(F::NAME).await;
    let fx = F::start(&ctx.queue, Broker::Shared).await;
    fx.create_topic(&ctx.queue).await;
    sqlx::query(&format!(
        "INSERT INTO {}.outbox (topic, event, key, payload, headers) VALUES ($1, 'test.event', 'k', \
         '{{\"key\": \"k\", \"seq\": 1}}', \
         '{{\"traceparent\": \"garbage\", \"tracestate\": \"a=b\", \"x-num\": 42, \"x-text\": \"v\"}}')",
        ctx.schema
    ))
    .bind(&ctx.queue)
    .execute(&ctx.pool)
    .await
    .unwrap();
    let relay = relay(&ctx, &fx, &[], &[]);
    all_sent(&ctx, &[&relay]).await;
    assert!(ctx.dead_letters().await.is_empty());
    let seen = fx.read(&ctx.queue, 1).await;
    let h = &seen[0].headers;
    assert!(
        h.get("traceparent").is_none() && h.get("tracestate").is_none(),
        "{h:?}"
    );
    assert_eq!(h.get("x-num"), Some(&Value::from("42")), "{h:?}");
    assert_eq!(h.get("x-text"), Some(&Value::from("v")), "{h:?}");
    assert_eq!(seen[0].payload, serde_json::json!({"key": "k", "seq": 1}));
    relay.wait_for_line("without its trace context", LONG).await;
    drop(relay);
    fx.cleanup().await;
    ctx.cleanup().await;
}
