//! What a sink refuses is dead-lettered, saying why, while the other keys
//! flow: with sent rows kept, and deleted.

use super::*;
use postbox::Event;
use std::collections::HashSet;

pub async fn refusals_are_dead_lettered_while_other_keys_flow<F: BrokerFixture>() {
    refusals::<F>("mark").await;
}

/// With `sent = "delete"` the claim deletes every row it takes: the refused
/// ones must come back (the batch is rolled back, then the sent ones
/// deleted) to be retried and dead-lettered.
pub async fn refusals_are_dead_lettered_when_sent_rows_are_deleted<F: BrokerFixture>() {
    refusals::<F>("delete").await;
}

/// The fixture's refusals spread among 40 good events over 8 keys (so they
/// share batches and waves with good ones), then one good event for each
/// refused key: each refused event is dead-lettered saying why, every good
/// one is read back once, and none of the refused.
async fn refusals<F: BrokerFixture>(sent: &str) {
    let ctx = Ctx::new(F::NAME).await;
    let fx = F::start(&ctx.queue, Broker::Shared).await;
    fx.create_topic(&ctx.queue).await;
    let refusals = fx.refusals(&ctx.queue).await;
    let refused: Vec<(Event, &[String])> = refusals
        .iter()
        .map(|r| {
            let payload = serde_json::json!({"key": r.key, "seq": 1, "pad": "x".repeat(r.pad)});
            let event = Event::new(&r.topic, "test.event", payload).key(&r.key);
            (event, r.error.as_slice())
        })
        .collect();
    let good: Vec<Event> = (1..=5)
        .flat_map(|i| ["a", "b", "c", "d", "e", "f", "g", "h"].map(|k| ctx.event(k, i)))
        .collect();
    let mut events: Vec<(Event, Option<&[String]>)> = Vec::new();
    let spread = (good.len() / refused.len().max(1)).max(1);
    let mut refused = refused.into_iter();
    for (i, e) in good.into_iter().enumerate() {
        events.push((e, None));
        if i % spread == spread - 1 {
            events.extend(refused.next().map(|(e, error)| (e, Some(error))));
        }
    }
    events.extend(refused.map(|(e, error)| (e, Some(error))));
    let keys: HashSet<&str> = refusals.iter().map(|r| r.key.as_str()).collect();
    events.extend(keys.iter().map(|k| (ctx.event(k, 2), None)));
    let (mut expected, mut good_ids) = (HashMap::new(), HashSet::new());
    for (e, error) in events {
        let mut tx = ctx.pool.begin().await.unwrap();
        let id = ctx.outbox.enqueue(&mut tx, e).await.unwrap().event_id;
        tx.commit().await.unwrap();
        if let Some(error) = error {
            expected.insert(id.to_string(), error);
        } else {
            good_ids.insert(id.to_string());
        }
    }
    assert_eq!(expected.len(), refusals.len(), "every refusal produced");

    let mut args: Vec<String> = FAST_DEAD_LETTER.iter().map(|s| s.to_string()).collect();
    args.extend(["--sent".into(), sent.into()]);
    args.extend(fx.refusal_flags());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let relay = relay(&ctx, &fx, &args, &[]);
    all_sent(&ctx, &[&relay]).await;
    wait_until(LONG, "every refusal dead-lettered", || async {
        ctx.dead_letters().await.len() >= expected.len()
    })
    .await;
    let dead = ctx.dead_letters().await;
    assert_eq!(dead.len(), expected.len(), "{dead:?}");
    for (id, error) in &dead {
        let words = expected.get(id).expect("only refused events dead-lettered");
        for w in *words {
            assert!(error.contains(w.as_str()), "{w:?} not in {error:?}");
        }
    }
    let seen = fx.read(&ctx.queue, good_ids.len()).await;
    let ids: HashSet<String> = seen.iter().map(|m| m.id.clone()).collect();
    assert_eq!(ids, good_ids, "every good event, none of the refused");
    assert_eq!(seen.len(), good_ids.len(), "each good event once");
    let left: i64 = sqlx::query_scalar(&format!("SELECT count(*) FROM {}.outbox", ctx.schema))
        .fetch_one(&ctx.pool)
        .await
        .unwrap();
    let kept = if sent == "delete" { 0 } else { good_ids.len() };
    assert_eq!(left, kept as i64, "outbox rows left with sent = {sent}");
    drop(relay);
    fx.cleanup().await;
    ctx.cleanup().await;
}
