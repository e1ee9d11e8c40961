//! Kafka beyond the conformance suite (`conformance/kafka.rs`): routes to two
//! sinks, TLS, a batch as one transaction, and waves.

use crate::support::*;
use postbox_kafka::rdkafka::consumer::{Consumer, StreamConsumer};
use postbox_testkit::{kafka_consume_independent, KafkaBroker};
use std::collections::HashMap;
use std::time::Duration;

pub(crate) fn kafka_args(b: &KafkaBroker) -> Vec<String> {
    vec![
        "--sink".into(),
        "kafka".into(),
        "--kafka-brokers".into(),
        b.bootstrap(),
        // Below the tests' --publish-timeout (3s), as the relay requires.
        "--kafka-message-timeout".into(),
        "2s".into(),
    ]
}

pub(crate) fn relay(
    ctx: &Ctx,
    b: &KafkaBroker,
    extra: &[&str],
    env: &[(&str, &str)],
) -> RelayProcess {
    let mut args = kafka_args(b);
    args.extend(extra.iter().map(|s| s.to_string()));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    ctx.relay_with(&args, env)
}

/// (key, seq) of each message, in consumption order per partition.
fn seqs(msgs: &[serde_json::Value]) -> Vec<(String, u64, String)> {
    msgs.iter()
        .map(|m| {
            let v: serde_json::Value = serde_json::from_str(m["value"].as_str().unwrap()).unwrap();
            (
                m["key"].as_str().unwrap().to_owned(),
                v["seq"].as_u64().unwrap(),
                m["headers"]["postbox-event-id"]
                    .as_str()
                    .unwrap()
                    .to_owned(),
            )
        })
        .collect()
}

pub(crate) fn stream_consumer(broker: &KafkaBroker, group: &str, topic: &str) -> StreamConsumer {
    let c: StreamConsumer = postbox_kafka::consumer_config(&broker.bootstrap(), group)
        .create()
        .unwrap();
    c.subscribe(&[topic]).unwrap();
    c
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_relay_feeds_bullmq_and_kafka_by_route() {
    let ctx = Ctx::new("route").await;
    let broker = KafkaBroker::start().await;
    let kafka_topic = format!("{}.payments", ctx.schema);
    broker.create_topic(&kafka_topic, 1);
    let cfg =
        std::env::temp_dir().join(format!("postbox-route-{}.toml", postbox_testkit::suffix()));
    std::fs::write(
        &cfg,
        format!(
            "sink = \"bullmq\"\n\n[kafka]\nbrokers = \"{}\"\nvalue = \"envelope\"\nmessage_timeout = \"2s\"\n[kafka.topics]\n\"payment.completed\" = \"{kafka_topic}\"\n\n[[routes]]\ntopic = \"payment.*\"\nsink = \"kafka\"\n",
            broker.bootstrap()
        ),
    )
    .unwrap();
    let redis = postbox_testkit::redis_url();
    let relay = ctx.relay(&redis, &["--config", cfg.to_str().unwrap()], &[]);
    let mut tx = ctx.pool.begin().await.unwrap();
    let paid = ctx
        .outbox
        .enqueue(
            &mut tx,
            postbox::Event::new(
                "payment.completed",
                "payment.completed",
                serde_json::json!({"amount": 42}),
            )
            .key("order-7"),
        )
        .await
        .unwrap();
    ctx.outbox
        .enqueue(&mut tx, ctx.event("chat", 1))
        .await
        .unwrap();
    tx.commit().await.unwrap();
    wait_until(LONG, "both events relayed", || async {
        ctx.unsent().await == 0
    })
    .await;

    // The chat event went to BullMQ...
    assert_eq!(RedisView::new(&redis, &ctx.queue).await.wait_len().await, 1);
    // ...the payment to Kafka, mapped to its topic, wrapped in the envelope.
    let msgs = kafka_consume_independent(&broker.bootstrap(), &kafka_topic, 1, 60).await;
    let env: serde_json::Value = serde_json::from_str(msgs[0]["value"].as_str().unwrap()).unwrap();
    assert_eq!(env["id"], paid.event_id.to_string());
    assert_eq!(env["type"], "payment.completed");
    assert_eq!(env["key"], "order-7");
    assert_eq!(env["data"], serde_json::json!({"amount": 42}));
    let at = env["timestamp"].as_str().unwrap();
    assert!(
        chrono::DateTime::parse_from_rfc3339(at).is_ok() && at.ends_with('Z'),
        "{at}"
    );
    drop(relay);
    let _ = std::fs::remove_file(cfg);
    ctx.cleanup().await;
}

/// Kafka over TLS (`security.protocol=SSL` with the broker's CA): a relay that
/// does not trust the certificate keeps every row (no attempts used, the
/// reason in its log); one that does delivers them, and a TLS consumer reads
/// them. The SASL password in the same config never reaches the log.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_over_tls_verifies_the_broker_and_loses_nothing() {
    let ctx = Ctx::new("ktls").await;
    let broker = KafkaBroker::start_tls().await;
    broker.create_topic(&ctx.queue, 1);
    ctx.produce((1..=5).map(|i| ctx.event("k", i)).collect())
        .await;
    let config = |ca: &std::path::Path| {
        let file =
            std::env::temp_dir().join(format!("postbox-ktls-{}.toml", postbox_testkit::suffix()));
        std::fs::write(
            &file,
            format!(
                "[kafka.properties]\n\"security.protocol\" = \"SSL\"\n\"ssl.ca.location\" = {:?}\n\
                 \"ssl.endpoint.identification.algorithm\" = \"https\"\n\
                 \"sasl.password\" = \"canary-kafka-pw-9431\"\n",
                ca.display().to_string()
            ),
        )
        .unwrap();
        file
    };

    // A CA that did not sign the broker's certificate: nothing may move.
    let other = std::env::temp_dir().join(format!("postbox-ktls-ca-{}", postbox_testkit::suffix()));
    postbox_testkit::self_signed_cert(&other);
    let wrong_file = config(&other.join("cert.pem"));
    let mut untrusting = relay(
        &ctx,
        &broker,
        &["--config", wrong_file.to_str().unwrap()],
        &[],
    );
    untrusting
        .wait_for_line("certificate verify failed", LONG)
        .await;
    untrusting.signal("TERM");
    untrusting.wait(LONG).await;
    assert_eq!(ctx.unsent().await, 5);
    let attempts: i64 = sqlx::query_scalar(&format!(
        "SELECT coalesce(sum(attempts), 0) FROM {}.outbox",
        ctx.schema
    ))
    .fetch_one(&ctx.pool)
    .await
    .unwrap();
    assert_eq!(attempts, 0, "a TLS failure is transient: no attempts used");
    assert!(
        !untrusting.output().contains("canary-kafka-pw-9431"),
        "the SASL password leaked into the relay's output"
    );

    let file = config(&broker.tls_ca());
    let trusting = relay(&ctx, &broker, &["--config", file.to_str().unwrap()], &[]);
    wait_until(LONG, "all rows delivered over TLS", || async {
        ctx.unsent().await == 0
    })
    .await;

    // Read back over TLS with the same CA.
    let c: StreamConsumer = postbox_kafka::consumer_config(&broker.bootstrap(), "tls-reader")
        .set("security.protocol", "SSL")
        .set("ssl.ca.location", broker.tls_ca().to_str().unwrap())
        .create()
        .unwrap();
    c.subscribe(&[ctx.queue.as_str()]).unwrap();
    let mut seqs = Vec::new();
    while seqs.len() < 5 {
        let m = tokio::time::timeout(LONG, c.recv())
            .await
            .expect("5 messages over TLS")
            .unwrap();
        let v: serde_json::Value =
            serde_json::from_slice(postbox_kafka::rdkafka::Message::payload(&m).unwrap()).unwrap();
        seqs.push(v["seq"].as_u64().unwrap());
    }
    assert_eq!(seqs, vec![1, 2, 3, 4, 5]);
    drop(trusting);
    let _ = std::fs::remove_file(wrong_file);
    let _ = std::fs::remove_dir_all(other);
    let _ = std::fs::remove_file(file);
    ctx.cleanup().await;
}

/// A claimed row for the sink-level tests (the relay sets `schema`).
fn row(id: i64, topic: &str, key: Option<&str>, seq: u64) -> postbox_relay::OutboxEvent {
    postbox_relay::OutboxEvent {
        id,
        event_id: uuid::Uuid::new_v4(),
        topic: topic.into(),
        event: "test.event".into(),
        key: key.map(Into::into),
        payload: serde_json::json!({ "key": key, "seq": seq }),
        headers: serde_json::json!({}),
        attempts: 0,
        created_at: chrono::Utc::now(),
        schema: "public".into(),
    }
}

fn encoded<'a>(
    sink: &postbox_kafka::KafkaSink,
    batch: &'a [postbox_relay::OutboxEvent],
) -> Vec<postbox_relay::Encoded<'a, postbox_kafka::Outgoing>> {
    use postbox_relay::Sink;
    batch
        .iter()
        .map(|event| postbox_relay::Encoded {
            event,
            message: sink.encode(event).unwrap(),
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deep_batch_goes_to_kafka_as_one_transaction_in_key_order() {
    use postbox_relay::{GroupOutcome, Sink};
    let broker = KafkaBroker::start().await;
    let topic = format!("ktx_{}", uuid::Uuid::new_v4().simple());
    broker.create_topic(&topic, 2);
    let sink = postbox_kafka::KafkaSink::new(
        postbox_kafka::KafkaConfig {
            brokers: broker.bootstrap(),
            ..Default::default()
        },
        Duration::from_secs(10),
    )
    .unwrap();
    assert!(sink.groups().is_some(), "transactions are the default");
    // Three keys ten deep, interleaved, then two more batches on the same
    // producers (the pool hands a committed producer out again).
    let mut id = 0;
    for round in 0..3u64 {
        let batch: Vec<_> = (1..=30u64)
            .map(|i| {
                id += 1;
                let key = ["a", "b", "c"][(i % 3) as usize];
                row(id, &topic, Some(key), round * 10 + i.div_ceil(3))
            })
            .collect();
        match sink.send_group(encoded(&sink, &batch)).await {
            GroupOutcome::Delivered => {}
            other => panic!("round {round}: {other:?}"),
        }
    }
    let got = seqs(&kafka_consume_independent(&broker.bootstrap(), &topic, 90, 60).await);
    let mut per_key: HashMap<&str, Vec<u64>> = HashMap::new();
    for (key, seq, _) in &got {
        per_key.entry(key).or_default().push(*seq);
    }
    for key in ["a", "b", "c"] {
        assert_eq!(per_key[key], (1..=30).collect::<Vec<_>>(), "key {key}");
    }

    // A batch for a topic that does not exist is left to waves, which
    // reject the events at fault (nothing is produced in a transaction).
    let missing = format!("ktx_missing_{}", uuid::Uuid::new_v4().simple());
    let batch: Vec<_> = (1..=6)
        .map(|i| row(100 + i, &missing, Some("a"), i as u64))
        .collect();
    assert!(matches!(
        sink.send_group(encoded(&sink, &batch)).await,
        GroupOutcome::Unclear
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_in_waves_keeps_key_order_too() {
    let ctx = Ctx::new("kwaves").await;
    let broker = KafkaBroker::start().await;
    broker.create_topic(&ctx.queue, 2);
    let relay = relay(
        &ctx,
        &broker,
        &["--batch-size", "40", "--kafka-publish", "waves"],
        &[],
    );
    const N: usize = 200;
    let events: Vec<_> = (0..N)
        .map(|i| ctx.event(&format!("k{}", i % 4), i / 4 + 1))
        .collect();
    ctx.produce(events).await;
    wait_until(LONG, "all rows marked sent", || async {
        ctx.unsent().await == 0
    })
    .await;
    let got = seqs(&kafka_consume_independent(&broker.bootstrap(), &ctx.queue, N, 60).await);
    let mut per_key: HashMap<&str, Vec<u64>> = HashMap::new();
    for (key, seq, _) in &got {
        per_key.entry(key).or_default().push(*seq);
    }
    for k in 0..4 {
        assert_eq!(
            per_key[format!("k{k}").as_str()],
            (1..=(N / 4) as u64).collect::<Vec<_>>()
        );
    }
    drop(relay);
    ctx.cleanup().await;
}
