//! RabbitMQ beyond the conformance suite (`conformance/rabbitmq.rs`): topics
//! the relay declares, and a node's own size limit.

use crate::conformance::rabbitmq::amqplib_read;
use crate::support::*;
use postbox_testkit::RabbitmqServer;
use std::collections::HashSet;

/// The relay declares the exchange and queue named after a topic
/// (`declare = true`); a node's own limit (`max_message_size`, under the
/// sink's `max_message_bytes`) closes the channel on the message over it,
/// which is dead-lettered naming it while the events beside it are sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rabbitmq_declares_topics_and_dead_letters_only_what_the_node_refuses() {
    let ctx = Ctx::new("rabbitsize").await;
    let rabbit = RabbitmqServer::start("max_message_size = 4096").await;
    let url = rabbit.url();
    let mut events: Vec<_> = (1..=20)
        .map(|i| ctx.event(&format!("k{}", i % 8), i))
        .collect();
    let pad = "x".repeat(5000);
    let big = serde_json::json!({"key": "big", "seq": 1, "pad": pad});
    events.insert(
        10,
        postbox::Event::new(&ctx.queue, "test.event", big).key("big"),
    );
    ctx.produce(events).await;
    let mut args = vec!["--sink", "rabbitmq", "--rabbitmq-url", &url];
    args.extend(FAST_DEAD_LETTER);
    args.extend(["--rabbitmq-declare", "true"]);
    let relay = ctx.relay_with(&args, &[]);
    wait_until(LONG, "the oversized event dead-lettered", || async {
        !ctx.dead_letters().await.is_empty()
    })
    .await;
    wait_until(LONG, "the others sent", || async {
        ctx.unsent().await == 0
    })
    .await;
    let dead = ctx.dead_letters().await;
    assert_eq!(dead.len(), 1, "only the oversized event: {dead:?}");
    assert!(dead[0].1.contains("max size"), "{dead:?}");
    let seen = amqplib_read(&url, &ctx.queue, 20).await;
    let ids: HashSet<&str> = seen
        .iter()
        .filter_map(|m| m["messageId"].as_str())
        .collect();
    assert_eq!(ids.len(), 20, "every other event in the declared queue");
    // The node discards what follows the oversized message on its channel
    // and closes it: what it stored but could not confirm before that is
    // sent again (RabbitMQ does not de-duplicate; the inbox does).
    eprintln!(
        "rabbitmq size limit: 20 events, {} messages read, {} duplicates",
        seen.len(),
        seen.len() - 20
    );
    drop(relay);
    ctx.cleanup().await;
}
