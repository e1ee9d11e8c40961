//! NATS JetStream beyond the conformance suite (`conformance/nats.rs`): a
//! replicated stream on a three-server cluster.

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
