//! A broker killed under load costs no attempts and loses nothing.

use super::*;

/// 100 events sent, the broker SIGKILLed, 100 more produced: over three
/// failed passes the rows wait with no attempt counted; after the restart
/// all are sent, nothing dead-lettered, and the broker holds every event
/// (those of the outage, where it keeps nothing across a restart) in key order.
pub async fn a_killed_broker_costs_no_attempts_and_loses_nothing<F: KillableBroker>() {
    let ctx = Ctx::new(F::NAME).await;
    let mut fx = F::start(&ctx.queue, Broker::Own).await;
    fx.create_topic(&ctx.queue).await;
    let relay = relay(&ctx, &fx, &[], &[]);
    let produce = |from: usize| {
        (from..from + 100)
            .map(|i| ctx.event(&format!("k{}", i % 8), i / 8 + 1))
            .collect::<Vec<_>>()
    };
    ctx.produce(produce(0)).await;
    all_sent(&ctx, &[&relay]).await;
    fx.kill();
    ctx.produce(produce(100)).await;
    wait_until(
        LONG,
        "three failed passes against the dead broker",
        || async { relay.output().matches("broker unavailable").count() >= 3 },
    )
    .await;
    assert_eq!(ctx.max_attempts().await, 0, "an outage costs no attempts");
    assert!(ctx.dead_letters().await.is_empty());
    assert_eq!(ctx.unsent().await, 100);
    fx.restart().await;
    all_sent(&ctx, &[&relay]).await;
    let dead = ctx.dead_letters().await;
    assert!(dead.is_empty(), "{dead:?}\n{}", relay.output());

    let kept = if F::KEEPS_MESSAGES { 200 } else { 100 };
    let seen = fx.read(&ctx.queue, kept).await;
    let rows = rows(&ctx).await;
    let mut first = FirstOccurrences::default();
    if !F::KEEPS_MESSAGES {
        // Each key's first occurrences continue after what was lost.
        for i in 92..100 {
            first.after(&format!("k{}", i % 8), (i / 8 + 1) as i64);
        }
    }
    for m in &seen {
        let row = rows
            .get(&m.id)
            .expect("the message's id is an outbox event id");
        check(&fx, m, row);
        first.see(&m.id, &row.key, row.seq);
    }
    assert_eq!(first.distinct(), kept, "every event stored, none lost");
    if F::DROPS_RESENDS {
        assert_eq!(seen.len(), kept, "each event stored once");
    }
    drop(relay);
    fx.cleanup().await;
    ctx.cleanup().await;
}
