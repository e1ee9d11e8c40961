//! NATS JetStream: the relay's sink (Nats-Msg-Id, awaited PubAcks) against a
//! real `nats-server` of each test's own, read back by the NATS maintainers'
//! JavaScript client, and the inbox pull consumer.

use crate::node_interop::node;
use crate::support::*;
use postbox_nats::async_nats::jetstream::{self, stream};
use postbox_testkit::NatsServer;
use serde_json::Value;
use std::collections::{HashMap, HashSet};
use std::time::Duration;

fn relay(ctx: &Ctx, nats: &NatsServer, extra: &[&str]) -> RelayProcess {
    let url = nats.url();
    // Below the tests' --publish-timeout (3s), as the relay requires.
    let mut args = vec![
        "--sink",
        "nats",
        "--nats-url",
        &url,
        "--nats-ack-timeout",
        "2s",
    ];
    args.extend_from_slice(extra);
    ctx.relay("redis://127.0.0.1:1", &args, &[])
}

async fn js(nats: &NatsServer) -> jetstream::Context {
    jetstream::new(postbox_nats::async_nats::connect(nats.url()).await.unwrap())
}

/// A file-backed stream capturing `subjects` (dedupe window: the default 2 min).
async fn create_stream(js: &jetstream::Context, name: &str, subjects: Vec<String>) {
    js.create_stream(stream::Config {
        name: name.to_owned(),
        subjects,
        storage: stream::StorageType::File,
        ..Default::default()
    })
    .await
    .unwrap();
}

/// What the JavaScript client read: (messages stored, the first `n` messages).
async fn js_read(nats: &NatsServer, stream: &str, n: usize) -> (u64, Vec<Value>) {
    let url = nats.url();
    let count = n.to_string();
    let lines = node("nats_consume.mjs", &[&url, stream, &count, "15"]).await;
    let v: Value = serde_json::from_str(lines.last().expect("one JSON line")).unwrap();
    (
        v["stored"].as_u64().unwrap(),
        v["messages"].as_array().unwrap().clone(),
    )
}

/// The stream's name for a test queue (streams may not contain '-' in the CLI's eyes; keep it simple).
fn stream_name(ctx: &Ctx) -> String {
    ctx.schema.to_uppercase()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_events_arrive_once_and_in_key_order_through_relay_kills() {
    let ctx = Ctx::new("nats").await;
    let nats = NatsServer::start("").await;
    let stream = stream_name(&ctx);
    create_stream(&js(&nats).await, &stream, vec![format!("{}.>", ctx.queue)]).await;
    let tp = |i: usize| format!("00-4bf92f3577b34da6a3ce929d0e{i:06x}-00f067aa0ba902b7-01");
    const N: usize = 1000;
    let mut seq: HashMap<String, usize> = HashMap::new();
    let mut events = Vec::new();
    for i in 0..N {
        let key = format!("k{}", i % 16);
        let s = seq.entry(key.clone()).or_default();
        *s += 1;
        events.push(ctx.event(&key, *s).traceparent(tp(i)));
    }
    let mut tx = ctx.pool.begin().await.unwrap();
    ctx.outbox.enqueue_many(&mut tx, events).await.unwrap();
    tx.commit().await.unwrap();

    let args = ["--nats-subject", "{topic}.{key}", "--batch-size", "50"];
    let mut doomed = relay(&ctx, &nats, &args);
    let r2 = relay(&ctx, &nats, &args);
    wait_until(LONG, "some events relayed", || async {
        ctx.unsent().await < (N as i64) * 3 / 4
    })
    .await;
    doomed.signal("KILL");
    doomed.wait(LONG).await;
    let r3 = relay(&ctx, &nats, &args);
    wait_until(LONG, "every event relayed", || async {
        ctx.unsent().await == 0
    })
    .await;

    let (stored, seen) = js_read(&nats, &stream, N).await;
    let rows: HashMap<String, (String, i64)> =
        sqlx::query_as::<_, (String, String, i64)>(&format!(
            "SELECT event_id::text, key, (payload->>'seq')::bigint FROM {}.outbox",
            ctx.schema
        ))
        .fetch_all(&ctx.pool)
        .await
        .unwrap()
        .into_iter()
        .map(|(id, k, s)| (id, (k, s)))
        .collect();
    let mut ids = HashSet::new();
    let mut last: HashMap<String, i64> = HashMap::new();
    for m in &seen {
        let id = m["headers"]["Nats-Msg-Id"].as_str().unwrap();
        let (key, s) = rows.get(id).expect("Nats-Msg-Id = an outbox event id");
        assert_eq!(m["subject"], format!("{}.{key}", ctx.queue));
        assert_eq!(m["headers"]["postbox-event"], "test.event");
        assert_eq!(m["headers"]["postbox-key"], key.as_str());
        assert!(m["headers"]["traceparent"]
            .as_str()
            .unwrap()
            .starts_with("00-"));
        assert_eq!(m["body"]["seq"], *s, "payload intact");
        assert!(ids.insert(id.to_owned()), "{id} stored twice");
        let prev = last.insert(key.clone(), *s).unwrap_or(0);
        assert_eq!(*s, prev + 1, "key {key}: stream order = outbox order");
    }
    assert_eq!(ids.len(), N);
    assert_eq!(
        stored, N as u64,
        "the relay's re-sends after the kill were dropped by the stream's duplicate window"
    );
    drop((r2, r3));
    ctx.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_refusals_are_dead_lettered_while_other_keys_flow() {
    let ctx = Ctx::new("natsbad").await;
    let nats = NatsServer::start("max_payload: 4096").await;
    let stream = stream_name(&ctx);
    // The stream's own limit, below the server's max_payload.
    js(&nats)
        .await
        .create_stream(stream::Config {
            name: stream.clone(),
            subjects: vec![ctx.queue.clone()],
            storage: stream::StorageType::File,
            max_message_size: 2048,
            ..Default::default()
        })
        .await
        .unwrap();
    let no_stream = format!("{}-nostream", ctx.queue);
    let mut events = Vec::new();
    for i in 1..=5 {
        for k in ["a", "b", "c"] {
            events.push(ctx.event(k, i));
        }
    }
    events.push(event(&no_stream, "x", 1));
    events.push(
        postbox::Event::new(
            &ctx.queue,
            "test.event",
            serde_json::json!({"key": "big", "seq": 1, "pad": "x".repeat(8000)}),
        )
        .key("big"),
    );
    // Under max_payload, over the stream's max_msg_size (JetStream 10054).
    events.push(
        postbox::Event::new(
            &ctx.queue,
            "test.event",
            serde_json::json!({"key": "large", "seq": 1, "pad": "x".repeat(3000)}),
        )
        .key("large"),
    );
    ctx.produce(events).await;
    let _relay = relay(&ctx, &nats, FAST_DEAD_LETTER);
    wait_until(LONG, "three dead letters", || async {
        ctx.dead_letters().await.len() == 3
    })
    .await;
    let errors: Vec<String> = ctx.dead_letters().await.into_iter().map(|d| d.1).collect();
    assert!(
        errors.iter().any(|e| e.contains(&format!(
            "no JetStream stream captures subject {no_stream:?}"
        ))),
        "{errors:?}"
    );
    assert!(
        errors.iter().any(|e| e.contains("max_payload")),
        "{errors:?}"
    );
    assert!(
        errors
            .iter()
            .any(|e| e.contains("its stream's max_msg_size")),
        "{errors:?}"
    );
    wait_until(LONG, "the good events sent", || async {
        ctx.unsent().await == 0
    })
    .await;
    let (stored, _) = js_read(&nats, &stream, 15).await;
    assert_eq!(stored, 15, "every good event once, none of the refused");
    ctx.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_killed_under_load_costs_no_attempts_and_loses_nothing() {
    let ctx = Ctx::new("natskill").await;
    let mut nats = NatsServer::start("").await;
    let stream = stream_name(&ctx);
    create_stream(&js(&nats).await, &stream, vec![ctx.queue.clone()]).await;
    let relay = relay(&ctx, &nats, &[]);
    survives_a_killed_broker(&ctx, &relay, &mut nats).await;
    let (stored, _) = js_read(&nats, &stream, 200).await;
    assert_eq!(stored, 200, "every event stored once");
    ctx.cleanup().await;
}

/// The durability docs/src/sinks/nats.md asks for, under test: a stream with three
/// replicas on a three-server cluster (a PubAck means a quorum stored the
/// message), the relay given every server. One server SIGKILLed under load
/// loses nothing; the relay reconnects to another.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_replicated_stream_keeps_every_event_when_a_server_dies() {
    let ctx = Ctx::new("natsr3").await;
    let mut cluster = NatsServer::start_cluster(3).await;
    let urls = cluster
        .iter()
        .map(|s| s.url())
        .collect::<Vec<_>>()
        .join(",");
    let servers: Vec<postbox_nats::async_nats::ServerAddr> =
        cluster.iter().map(|s| s.url().parse().unwrap()).collect();
    let js = jetstream::new(postbox_nats::async_nats::connect(servers).await.unwrap());
    let stream = stream_name(&ctx);
    // JetStream elects its meta leader a moment after the servers start.
    wait_until(LONG, "a replicated stream created", || async {
        js.create_stream(stream::Config {
            name: stream.clone(),
            subjects: vec![ctx.queue.clone()],
            storage: stream::StorageType::File,
            num_replicas: 3,
            ..Default::default()
        })
        .await
        .is_ok()
    })
    .await;
    let relay = ctx.relay(
        "redis://127.0.0.1:1",
        &[
            "--sink",
            "nats",
            "--nats-url",
            &urls,
            "--nats-ack-timeout",
            "2s",
        ],
        &[],
    );
    let produce = |from: usize| {
        (from..from + 150)
            .map(|i| ctx.event(&format!("k{}", i % 8), i))
            .collect::<Vec<_>>()
    };
    ctx.produce(produce(0)).await;
    wait_until(LONG, "the first events sent", || async {
        ctx.unsent().await == 0
    })
    .await;
    // The server the relay most likely talks to first, and a stream peer.
    cluster[0].kill();
    ctx.produce(produce(150)).await;
    wait_until(LONG, "every event sent with a server gone", || async {
        ctx.unsent().await == 0
    })
    .await;
    let dead = ctx.dead_letters().await;
    assert!(dead.is_empty(), "{dead:?}\n{}", relay.output());
    let info = js
        .get_stream(&stream)
        .await
        .unwrap()
        .info()
        .await
        .unwrap()
        .clone();
    assert_eq!(info.state.messages, 300, "every event stored once");
    drop(relay);
    ctx.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_inbox_consumer_applies_each_message_once_and_in_order_across_a_crash() {
    let ctx = Ctx::new("natsin").await;
    let nats = NatsServer::start("").await;
    let stream = stream_name(&ctx);
    let context = js(&nats).await;
    create_stream(&context, &stream, vec![ctx.queue.clone()]).await;
    ctx.twenty_events_and_an_effects_table().await;
    let relay = relay(&ctx, &nats, &[]);
    let fifth = ctx.fifth_event_once_sent().await;
    let mut config = postbox_nats::consumer_config("effects");
    // Short, so the test sees the redelivery soon.
    config.ack_wait = Duration::from_secs(1);
    let durable = context
        .get_stream(&stream)
        .await
        .unwrap()
        .create_consumer(config)
        .await
        .unwrap();
    let inbox = postbox::InboxConsumer::new(
        ctx.pool.clone(),
        postbox::Inbox::new(&ctx.schema).unwrap(),
        "effects",
    );
    let key = |m: &postbox::Message| m.key.clone();
    // Consumer 1 dies after the inbox commit of the 5th message, before its ack.
    let first = Effects::new(&ctx.schema, key, Some(fifth));
    {
        let (inbox, e, c) = (inbox.clone(), first.clone(), durable.clone());
        let task = tokio::spawn(async move {
            postbox_nats::inbox_consumer(&inbox, &c, &*e, Default::default()).await
        });
        tokio::time::timeout(LONG, first.hung.notified())
            .await
            .expect("consumer reached the 5th message");
        task.abort();
        let _ = task.await;
    }
    // Published after the crash: a consumer that had been handed messages
    // 6-20 would leave them waiting out ack_wait while these take effect.
    ctx.produce((21..=30).map(|i| ctx.event("k", i)).collect())
        .await;
    wait_until(LONG, "rows sent", || async { ctx.unsent().await == 0 }).await;
    let second = Effects::new(&ctx.schema, key, None);
    let stop = postbox_nats::CancellationToken::new();
    let consume = postbox_nats::inbox_consumer(&inbox, &durable, &*second, stop.clone());
    recovers_once(&ctx, &second, 30, &stop, consume).await;
    let seq = ctx.rows_by_event_id().await;
    let applied: Vec<String> = sqlx::query_scalar(&format!(
        "SELECT message_id FROM {}.effects ORDER BY n",
        ctx.schema
    ))
    .fetch_all(&ctx.pool)
    .await
    .unwrap();
    let order: Vec<i64> = applied.iter().map(|id| seq[id].1).collect();
    assert_eq!(
        order,
        (1..=30).collect::<Vec<_>>(),
        "effects in stream order"
    );
    drop(relay);
    ctx.cleanup().await;
}
