//! RabbitMQ: the relay's sink (publisher confirms, mandatory, persistent)
//! against the real server, read back by an independent client (Node
//! `amqplib`), and the inbox consumer.

use crate::node_interop::node;
use crate::support::*;
use postbox_rabbitmq::lapin::options::{
    ExchangeDeclareOptions, ExchangeDeleteOptions, QueueDeclareOptions, QueueDeleteOptions,
};
use postbox_rabbitmq::lapin::types::FieldTable;
use postbox_rabbitmq::lapin::{Channel, Connection, ConnectionProperties, ExchangeKind};
use serde_json::Value;
use std::collections::{HashMap, HashSet};

fn relay(ctx: &Ctx, url: &str, extra: &[&str]) -> RelayProcess {
    let mut args = vec!["--sink", "rabbitmq", "--rabbitmq-url", url];
    args.extend_from_slice(extra);
    ctx.relay("redis://127.0.0.1:1", &args, &[])
}

async fn channel(url: &str) -> (Connection, Channel) {
    let conn = Connection::connect(url, ConnectionProperties::default())
        .await
        .expect("RabbitMQ runs (./scripts/test.sh starts it)");
    let ch = conn.create_channel().await.unwrap();
    (conn, ch)
}

/// Remove what a test declared (exchanges and queues named after its queue).
async fn tidy(ch: &Channel, names: &[String]) {
    for n in names {
        let _ = ch
            .queue_delete(n.as_str().into(), QueueDeleteOptions::default())
            .await;
        let _ = ch
            .exchange_delete(n.as_str().into(), ExchangeDeleteOptions::default())
            .await;
    }
}

/// Messages read by amqplib: (key, seq, message id), in queue order.
async fn amqplib_read(url: &str, queue: &str, at_least: usize) -> Vec<Value> {
    let n = at_least.to_string();
    let lines = node("amqp_consume.mjs", &[url, queue, &n, "15"]).await;
    serde_json::from_str(lines.last().expect("one JSON line")).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rabbitmq_events_arrive_intact_and_in_key_order_through_relay_kills() {
    let ctx = Ctx::new("rabbit").await;
    let (_conn, ch) = channel(&postbox_testkit::rabbitmq_url()).await;
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
    let mut outbox = ctx.pool.begin().await.unwrap();
    ctx.outbox.enqueue_many(&mut outbox, events).await.unwrap();
    outbox.commit().await.unwrap();

    // Declared for a quick start: exchange and queue named after the topic.
    let declare = ["--rabbitmq-declare", "true", "--batch-size", "50"];
    let mut doomed = relay(&ctx, &postbox_testkit::rabbitmq_url(), &declare);
    let r2 = relay(&ctx, &postbox_testkit::rabbitmq_url(), &declare);
    wait_until(LONG, "some events relayed", || async {
        ctx.unsent().await < (N as i64) * 3 / 4
    })
    .await;
    doomed.signal("KILL");
    doomed.wait(LONG).await;
    let r3 = relay(&ctx, &postbox_testkit::rabbitmq_url(), &declare);
    wait_until(LONG, "every event relayed", || async {
        ctx.unsent().await == 0
    })
    .await;

    let seen = amqplib_read(&postbox_testkit::rabbitmq_url(), &ctx.queue, N).await;
    let rows = ctx.rows_by_event_id().await;
    let mut first = FirstOccurrences::default();
    for m in &seen {
        let id = m["messageId"].as_str().unwrap();
        let (key, s) = rows.get(id).expect("message id = an outbox event id");
        assert_eq!(m["type"], "test.event");
        assert_eq!(m["contentType"], "application/json");
        assert_eq!(m["deliveryMode"], 2, "persistent");
        assert_eq!(m["exchange"], ctx.queue.as_str());
        assert_eq!(m["routingKey"], key.as_str(), "routing key = the event key");
        assert_eq!(m["headers"]["postbox-key"], key.as_str());
        assert!(m["headers"]["traceparent"]
            .as_str()
            .unwrap()
            .starts_with("00-"));
        assert_eq!(m["body"]["seq"], *s, "payload intact");
        assert!(m["timestamp"].as_u64().unwrap() > 1_700_000_000);
        first.see(id, key, *s);
    }
    assert_eq!(first.distinct(), N, "every event at least once");
    println!(
        "rabbitmq order/kill: {N} events, {} messages read, {} duplicates (RabbitMQ does not de-duplicate; the inbox does)",
        seen.len(),
        seen.len() - N
    );
    drop((r2, r3));
    tidy(&ch, std::slice::from_ref(&ctx.queue)).await;
    ctx.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rabbitmq_refusals_are_dead_lettered_while_other_keys_flow() {
    let ctx = Ctx::new("rabbitbad").await;
    let (_conn, ch) = channel(&postbox_testkit::rabbitmq_url()).await;
    let good = ctx.queue.clone();
    let unbound = format!("{}-unbound", ctx.queue);
    let absent = format!("{}-absent", ctx.queue);
    // The good topic: an exchange with a queue bound to every key. The
    // unbound one: an exchange nobody bound a queue to.
    let durable = ExchangeDeclareOptions {
        durable: true,
        ..Default::default()
    };
    for x in [&good, &unbound] {
        ch.exchange_declare(
            x.as_str().into(),
            ExchangeKind::Topic,
            durable,
            FieldTable::default(),
        )
        .await
        .unwrap();
    }
    ch.queue_declare(
        good.as_str().into(),
        QueueDeclareOptions::default(),
        FieldTable::default(),
    )
    .await
    .unwrap();
    ch.queue_bind(
        good.as_str().into(),
        good.as_str().into(),
        "#".into(),
        Default::default(),
        FieldTable::default(),
    )
    .await
    .unwrap();

    // Unroutable events share waves with good ones: RabbitMQ's acks may
    // cover several messages, and each return must land on its own event.
    let mut events = Vec::new();
    for i in 1..=5 {
        for k in ["a", "b", "c", "d", "e", "f", "g", "h"] {
            events.push(ctx.event(k, i));
        }
        if i <= 2 {
            for k in ["u", "v", "w"] {
                events.push(event(&unbound, k, i));
            }
        }
    }
    events.push(event(&absent, "x", 1));
    events.push(
        postbox::Event::new(
            &good,
            "test.event",
            serde_json::json!({"key": "big", "seq": 1, "pad": "x".repeat(2000)}),
        )
        .key("big"),
    );
    ctx.produce(events).await;
    let mut args: Vec<&str> = FAST_DEAD_LETTER.to_vec();
    args.extend(["--rabbitmq-max-message-bytes", "1000"]);
    let relay = relay(&ctx, &postbox_testkit::rabbitmq_url(), &args);
    let deadline = std::time::Instant::now() + LONG;
    while ctx.dead_letters().await.len() < 8 {
        // Say what was there, so a failure here can be read.
        assert!(
            std::time::Instant::now() < deadline,
            "eight dead letters within {LONG:?}; got {:?}; unsent {}; relay:\n{}",
            ctx.dead_letters().await,
            ctx.unsent().await,
            relay.output()
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let mut dead_topics: Vec<String> = sqlx::query_scalar(&format!(
        "SELECT topic FROM {}.outbox_dead_letter ORDER BY topic",
        ctx.schema
    ))
    .fetch_all(&ctx.pool)
    .await
    .unwrap();
    dead_topics.dedup_by(|a, b| a == b && a == &unbound);
    assert_eq!(
        sqlx::query_scalar::<_, i64>(&format!(
            "SELECT count(*) FROM {}.outbox_dead_letter WHERE topic = $1",
            ctx.schema
        ))
        .bind(&unbound)
        .fetch_one(&ctx.pool)
        .await
        .unwrap(),
        6,
        "exactly the six unroutable events: {dead_topics:?}"
    );
    let errors: Vec<String> = ctx.dead_letters().await.into_iter().map(|d| d.1).collect();
    assert!(
        errors.iter().any(|e| e.contains("unroutable")
            && e.contains(&format!("exchange {unbound:?}"))
            && e.contains("routing key \"u\"")),
        "{errors:?}"
    );
    assert!(
        errors
            .iter()
            .any(|e| e.contains(&format!("exchange {absent:?} does not exist"))),
        "{errors:?}"
    );
    assert!(
        errors
            .iter()
            .any(|e| e.contains("rabbitmq.max_message_bytes")),
        "{errors:?}"
    );
    wait_until(LONG, "the good events sent", || async {
        ctx.unsent().await == 0
    })
    .await;
    let seen = amqplib_read(&postbox_testkit::rabbitmq_url(), &good, 40).await;
    assert_eq!(seen.len(), 40, "every good event once, none of the refused");
    assert_eq!(ctx.dead_letters().await.len(), 8);
    tidy(&ch, &[good, unbound]).await;
    ctx.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rabbitmq_killed_under_load_costs_no_attempts_and_loses_nothing() {
    let ctx = Ctx::new("rabbitkill").await;
    // A node of the test's own, with a small server-side size limit.
    let mut rabbit = postbox_testkit::RabbitmqServer::start("max_message_size = 4096").await;
    let url = rabbit.url();
    let mut args: Vec<&str> = FAST_DEAD_LETTER.to_vec();
    args.extend(["--rabbitmq-declare", "true"]);
    let relay = relay(&ctx, &url, &args);
    survives_a_killed_broker(&ctx, &relay, &mut rabbit).await;

    // The server's own limit (max_message_size, under the sink's
    // max_message_bytes): the node closes the channel on that message; it is
    // dead-lettered, the events published beside it are not.
    let mut more: Vec<_> = (200..220)
        .map(|i| ctx.event(&format!("k{}", i % 8), i))
        .collect();
    more.insert(
        10,
        postbox::Event::new(
            &ctx.queue,
            "test.event",
            serde_json::json!({"key": "big", "seq": 1, "pad": "x".repeat(5000)}),
        )
        .key("big"),
    );
    ctx.produce(more).await;
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
    let seen = amqplib_read(&url, &ctx.queue, 220).await;
    let ids: HashSet<&str> = seen
        .iter()
        .filter_map(|m| m["messageId"].as_str())
        .collect();
    assert_eq!(ids.len(), 220, "every event stored, none lost in the kill");
    // The node discards what follows the oversized message on its channel
    // and closes it: what it stored but could not confirm before that is
    // sent again (RabbitMQ does not de-duplicate; the inbox does).
    eprintln!(
        "rabbitmq kill: 220 events, {} messages read, {} duplicates",
        seen.len(),
        seen.len() - 220
    );
    drop(relay);
    ctx.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rabbitmq_inbox_consumer_applies_each_message_once_across_a_crash() {
    let ctx = Ctx::new("rabbitin").await;
    ctx.twenty_events_and_an_effects_table().await;
    let relay = relay(
        &ctx,
        &postbox_testkit::rabbitmq_url(),
        &["--rabbitmq-declare", "true"],
    );
    let fifth = ctx.fifth_event_once_sent().await;
    let inbox = postbox::InboxConsumer::new(
        ctx.pool.clone(),
        postbox::Inbox::new(&ctx.schema).unwrap(),
        "effects",
    );
    let key = |m: &postbox::Message| m.key.clone();
    // Consumer 1 dies after the inbox commit of the 5th message, before its ack.
    let first = Effects::new(&ctx.schema, key, Some(fifth));
    {
        let (conn, ch) = channel(&postbox_testkit::rabbitmq_url()).await;
        let (inbox, e, q) = (inbox.clone(), first.clone(), ctx.queue.clone());
        let task = tokio::spawn(async move {
            postbox_rabbitmq::inbox_consumer(
                &inbox,
                &ch,
                &q,
                &*e,
                Default::default(),
                Default::default(),
            )
            .await
        });
        tokio::time::timeout(LONG, first.hung.notified())
            .await
            .expect("consumer reached the 5th message");
        task.abort();
        let _ = task.await;
        drop(conn); // the unacknowledged deliveries go back to the queue
    }
    let second = Effects::new(&ctx.schema, key, None);
    let stop = postbox_rabbitmq::CancellationToken::new();
    let (_conn, ch) = channel(&postbox_testkit::rabbitmq_url()).await;
    let consume = postbox_rabbitmq::inbox_consumer(
        &inbox,
        &ch,
        &ctx.queue,
        &*second,
        postbox_rabbitmq::ConsumerOptions {
            prefetch: 4,
            ..Default::default()
        },
        stop.clone(),
    );
    recovers_once(&ctx, &second, 20, &stop, consume).await;
    drop(relay);
    tidy(&ch, std::slice::from_ref(&ctx.queue)).await;
    ctx.cleanup().await;
}
