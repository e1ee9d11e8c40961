//! NATS JetStream beyond the conformance suite (`conformance/nats.rs`): a
//! replicated stream on a three-server cluster, and a stream's own size limit.

use crate::conformance::nats::stream_name;
use crate::support::*;
use postbox_nats::async_nats::jetstream::{self, stream};
use postbox_testkit::NatsServer;

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
    let stream = stream_name(&ctx.queue);
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
    let relay = ctx.relay_with(
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

/// A stream's own `max_msg_size`, below the server's `max_payload`: an event
/// over it can never go (JetStream error 10054), so it is dead-lettered with
/// the limit named, while the other keys' events arrive.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_an_event_over_its_streams_max_msg_size_is_dead_lettered_while_others_flow() {
    let ctx = Ctx::new("natsmax").await;
    let nats = NatsServer::start("").await;
    let js = jetstream::new(postbox_nats::async_nats::connect(nats.url()).await.unwrap());
    let stream = stream_name(&ctx.queue);
    js.create_stream(stream::Config {
        name: stream.clone(),
        subjects: vec![ctx.queue.clone()],
        storage: stream::StorageType::File,
        max_message_size: 2048,
        ..Default::default()
    })
    .await
    .unwrap();
    let mut events: Vec<_> = (1..=5)
        .flat_map(|i| ["a", "b"].map(|k| ctx.event(k, i)))
        .collect();
    events.push(
        postbox::Event::new(
            &ctx.queue,
            "test.event",
            serde_json::json!({"key": "large", "seq": 1, "pad": "x".repeat(3000)}),
        )
        .key("large"),
    );
    ctx.produce(events).await;
    let url = nats.url();
    let mut args = vec![
        "--sink",
        "nats",
        "--nats-url",
        &url,
        "--nats-ack-timeout",
        "2s",
    ];
    args.extend_from_slice(FAST_DEAD_LETTER);
    let relay = ctx.relay_with(&args, &[]);
    wait_until(LONG, "one dead letter, the rest sent", || async {
        ctx.dead_letters().await.len() == 1 && ctx.unsent().await == 0
    })
    .await;
    let dead = ctx.dead_letters().await;
    assert!(dead[0].1.contains("its stream's max_msg_size"), "{dead:?}");
    let info = js
        .get_stream(&stream)
        .await
        .unwrap()
        .info()
        .await
        .unwrap()
        .clone();
    assert_eq!(
        info.state.messages,
        10,
        "every other event stored once\n{}",
        relay.output()
    );
    drop(relay);
    ctx.cleanup().await;
}
