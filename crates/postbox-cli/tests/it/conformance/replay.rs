//! `postbox replay`: retained events sent again with their event ids.

use super::*;
use postbox::Event;

/// 40 events over 4 keys, relayed; then `postbox replay --key k1` makes k1's
/// sent rows unsent again and the running relay sends them again: on a
/// broker that keeps re-sends, k1's events arrive a second time with the
/// same event ids, after the first round and in key order, and no other
/// key's; a broker that drops a re-sent id within its window (BullMQ while
/// the job is kept, a NATS duplicate window, SQS FIFO deduplication) takes
/// them as the duplicates they are. Either way nothing is dead-lettered.
pub async fn replayed_events_arrive_again_with_their_ids<F: BrokerFixture>() {
    let ctx = Ctx::new(F::NAME).await;
    let fx = F::start(&ctx.queue, Broker::Shared).await;
    fx.create_topic(&ctx.queue).await;
    let (keys, per_key) = (4, 10);
    let events: Vec<Event> = (0..keys * per_key)
        .map(|i| ctx.event(&format!("k{}", i % keys), i / keys + 1))
        .collect();
    let mut tx = ctx.pool.begin().await.unwrap();
    ctx.outbox.enqueue_many(&mut tx, events).await.unwrap();
    tx.commit().await.unwrap();
    let relay = relay(&ctx, &fx, &[], &[]);
    all_sent(&ctx, &[&relay]).await;

    let out = postbox_replay(&ctx, &["--key", "k1", "--rate", "0", "--yes"]).await;
    assert!(out.contains("replayed 10 event(s)"), "{out}");
    wait_until(LONG, "the replay sent", || async {
        ctx.unsent().await == 0
    })
    .await;
    assert!(ctx.dead_letters().await.is_empty());

    let total = keys * per_key + if F::DROPS_RESENDS { 0 } else { per_key };
    let seen = fx.read(&ctx.queue, total).await;
    assert_eq!(seen.len(), total, "each event once, k1's twice where kept");
    let rows = rows(&ctx).await;
    let mut by_key: HashMap<&str, Vec<i64>> = HashMap::new();
    for m in &seen {
        let row = rows.get(&m.id).expect("an outbox event id");
        check(&fx, m, row);
        by_key.entry(row.key.as_str()).or_default().push(row.seq);
    }
    let once: Vec<i64> = (1..=per_key as i64).collect();
    for (key, seqs) in by_key {
        let expected = if key == "k1" && !F::DROPS_RESENDS {
            [once.clone(), once.clone()].concat()
        } else {
            once.clone()
        };
        assert_eq!(seqs, expected, "key {key}: in order, replayed after");
    }
    drop(relay);
    fx.cleanup().await;
    ctx.cleanup().await;
}

/// `postbox replay` over the test's schema since an hour ago, with `args`;
/// its output, or a panic with it when it fails.
pub(crate) async fn postbox_replay(ctx: &Ctx, args: &[&str]) -> String {
    let mut all = vec!["replay", "--schema", &ctx.schema, "--since", "1h"];
    all.extend_from_slice(args);
    let (ok, text) = postbox(&all).await;
    assert!(ok, "postbox {all:?}: {text}");
    text
}
