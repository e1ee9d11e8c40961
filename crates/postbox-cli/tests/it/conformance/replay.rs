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
    let relay = relayed_once(&ctx, &fx, keys, per_key).await;

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

/// `per_key` events for each of `keys` keys (`k0`, `k1`…, seq 1 up), in one
/// transaction, sent by a relay on the fixture's broker: that relay.
async fn relayed_once<F: BrokerFixture>(
    ctx: &Ctx,
    fx: &F,
    keys: usize,
    per_key: usize,
) -> RelayProcess {
    let events: Vec<Event> = (0..keys * per_key)
        .map(|i| ctx.event(&format!("k{}", i % keys), i / keys + 1))
        .collect();
    let mut tx = ctx.pool.begin().await.unwrap();
    ctx.outbox.enqueue_many(&mut tx, events).await.unwrap();
    tx.commit().await.unwrap();
    let relay = relay(ctx, fx, &[], &[]);
    all_sent(ctx, &[&relay]).await;
    relay
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

/// `postbox replay --to-topic`: retained events go to a topic of their own
/// (another queue, stream, subject or webhook URL) with their event ids and
/// in key order, and the live topic gets none of them: after the replay, one
/// more event per key on the live topic arrives right behind the first round
/// (a replayed event sent there would come before its key's marker).
pub async fn a_replay_to_a_topic_of_its_own_leaves_the_live_one_alone<F: BrokerFixture>() {
    let ctx = Ctx::new(F::NAME).await;
    let fx = F::start(&ctx.queue, Broker::Shared).await;
    let backfill = format!("{}-backfill", ctx.queue);
    fx.create_topic(&ctx.queue).await;
    fx.create_topic(&backfill).await;
    let (keys, per_key) = (2, 5);
    let relay = relayed_once(&ctx, &fx, keys, per_key).await;
    let rows = rows(&ctx).await;

    let out = postbox_replay(&ctx, &["--to-topic", &backfill, "--rate", "0", "--yes"]).await;
    assert!(
        out.contains("replayed 10 event(s)") && out.contains(&backfill),
        "{out}"
    );
    let markers: Vec<Event> = (0..keys)
        .map(|k| ctx.event(&format!("k{k}"), per_key + 1))
        .collect();
    ctx.produce(markers).await;
    all_sent(&ctx, &[&relay]).await;
    assert!(ctx.dead_letters().await.is_empty());

    let total = keys * per_key;
    let replayed = fx.read(&backfill, total).await;
    assert_eq!(
        replayed.len(),
        total,
        "each replayed event once, on its own topic"
    );
    let mut by_key: HashMap<String, Vec<i64>> = HashMap::new();
    for m in &replayed {
        let row = rows.get(&m.id).expect("a replayed event id");
        let sent_to = Row {
            topic: backfill.clone(),
            key: row.key.clone(),
            seq: row.seq,
            payload: row.payload.clone(),
            headers: row.headers.clone(),
            created_at: row.created_at,
        };
        check(&fx, m, &sent_to);
        by_key.entry(row.key.clone()).or_default().push(row.seq);
    }
    let once: Vec<i64> = (1..=per_key as i64).collect();
    assert!(by_key.values().all(|s| *s == once), "{by_key:?}");

    let live = fx.read(&ctx.queue, total + keys).await;
    let mut by_key: HashMap<String, Vec<i64>> = HashMap::new();
    for m in live.iter().take(total + keys) {
        by_key
            .entry(m.key.clone().unwrap_or_default())
            .or_default()
            .push(m.payload["seq"].as_i64().unwrap_or(0));
    }
    let with_marker: Vec<i64> = (1..=per_key as i64 + 1).collect();
    assert!(
        by_key.values().all(|s| *s == with_marker),
        "the live topic: the first round, then each key's marker: {by_key:?}"
    );
    drop(relay);
    fx.cleanup().await;
    ctx.cleanup().await;
}
