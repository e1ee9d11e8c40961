//! Kafka: the relay's idempotent-producer sink and the inbox consumer, against
//! a real Kafka-protocol broker (tansu) and an independent client (Python
//! confluent-kafka).

use crate::support::*;
use postbox_kafka::rdkafka::consumer::{Consumer, StreamConsumer};
use postbox_testkit::{kafka_consume_independent, KafkaBroker};
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::Arc;
use std::time::Duration;

fn kafka_args(b: &KafkaBroker) -> Vec<String> {
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
    ctx.relay("redis://127.0.0.1:1", &args, env)
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_events_arrive_intact_and_in_order_with_two_relays() {
    let ctx = Ctx::new("kafka").await;
    let broker = KafkaBroker::start().await;
    broker.create_topic(&ctx.queue, 4);
    let r1 = relay(&ctx, &broker, &["--batch-size", "50"], &[]);
    let r2 = relay(&ctx, &broker, &["--batch-size", "50"], &[]);
    const N: usize = 1000;
    let mut seq: HashMap<String, usize> = HashMap::new();
    let mut events = Vec::new();
    for i in 0..N {
        let key = format!("k{}", i % 16);
        let s = seq.entry(key.clone()).or_default();
        *s += 1;
        events.push(ctx.event(&key, *s).header(
            "traceparent",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        ));
    }
    for chunk in events.chunks(50) {
        let mut tx = ctx.pool.begin().await.unwrap();
        ctx.outbox
            .enqueue_many(&mut tx, chunk.to_vec())
            .await
            .unwrap();
        tx.commit().await.unwrap();
    }
    wait_until(LONG, "all rows marked sent", || async {
        ctx.unsent().await == 0
    })
    .await;
    let msgs = kafka_consume_independent(&broker.bootstrap(), &ctx.queue, N, 60).await;
    let got = seqs(&msgs);
    let ids: HashSet<&str> = got.iter().map(|g| g.2.as_str()).collect();
    assert_eq!(ids.len(), N, "every event once");
    // Per key, in order (a key lives in one partition; partitions are read in offset order).
    let mut last: HashMap<&str, u64> = HashMap::new();
    for (key, s, _) in &got {
        if let Some(p) = last.insert(key, *s) {
            assert!(*s > p, "key {key}: {s} after {p}");
        }
    }
    let m = &msgs[0];
    assert_eq!(m["headers"]["postbox-event"], "test.event");
    assert_eq!(
        m["headers"]["traceparent"],
        "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    );
    let row: (String, serde_json::Value) = sqlx::query_as(&format!(
        "SELECT key, payload FROM {}.outbox WHERE event_id = $1::uuid",
        ctx.schema
    ))
    .bind(m["headers"]["postbox-event-id"].as_str().unwrap())
    .fetch_one(&ctx.pool)
    .await
    .unwrap();
    assert_eq!(m["key"].as_str().unwrap(), row.0);
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(m["value"].as_str().unwrap()).unwrap(),
        row.1
    );
    drop((r1, r2));
    ctx.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_down_rows_wait_without_attempts_then_deliver() {
    let ctx = Ctx::new("kdown").await;
    let mut broker = KafkaBroker::start().await;
    broker.create_topic(&ctx.queue, 2);
    let relay = relay(&ctx, &broker, &["--kafka-message-timeout", "1s"], &[]);
    ctx.produce((1..=5).map(|i| ctx.event("a", i)).collect())
        .await;
    wait_until(LONG, "first events delivered", || async {
        ctx.unsent().await == 0
    })
    .await;

    broker.kill();
    ctx.produce((6..=20).map(|i| ctx.event("a", i)).collect())
        .await;
    relay.wait_for_line("broker unavailable", LONG).await;
    // Down for more than ten seconds: nothing is dead-lettered, no attempt counted.
    tokio::time::sleep(Duration::from_secs(10)).await;
    let attempts: i64 = sqlx::query_scalar(&format!(
        "SELECT coalesce(max(attempts), 0)::bigint FROM {}.outbox",
        ctx.schema
    ))
    .fetch_one(&ctx.pool)
    .await
    .unwrap();
    assert_eq!(attempts, 0);
    assert!(ctx.dead_letters().await.is_empty());
    assert_eq!(ctx.unsent().await, 15);

    // The memory broker comes back empty: the topic is created again.
    broker.restart().await;
    broker.create_topic(&ctx.queue, 2);
    wait_until(
        Duration::from_secs(90),
        "backlog delivered after the broker returns",
        || async { ctx.unsent().await == 0 },
    )
    .await;
    let got = seqs(&kafka_consume_independent(&broker.bootstrap(), &ctx.queue, 15, 60).await);
    let s: Vec<u64> = got.iter().map(|g| g.1).collect();
    let mut dedup = s.clone();
    dedup.dedup();
    assert_eq!(
        dedup,
        (6..=20).collect::<Vec<_>>(),
        "everything produced during the outage, in order"
    );
    drop(relay);
    ctx.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_oversized_payload_is_dead_lettered_and_others_flow() {
    let ctx = Ctx::new("kbig").await;
    let broker = KafkaBroker::start().await;
    broker.create_topic(&ctx.queue, 2);
    let relay = relay(&ctx, &broker, FAST_DEAD_LETTER, &[]);
    let big = serde_json::json!({"key": "big", "seq": 1, "pad": "x".repeat(2 * 1024 * 1024)});
    ctx.produce(vec![
        postbox::Event::new(&ctx.queue, "test.event", big).key("big"),
        ctx.event("big", 2),
        ctx.event("small", 1),
    ])
    .await;
    wait_until(LONG, "big row dead-lettered, the rest sent", || async {
        ctx.unsent().await == 0 && ctx.dead_letters().await.len() == 1
    })
    .await;
    let dl = ctx.dead_letters().await;
    assert!(dl[0].1.contains("over message.max.bytes"), "{}", dl[0].1);
    let got = seqs(&kafka_consume_independent(&broker.bootstrap(), &ctx.queue, 2, 60).await);
    assert!(got.iter().any(|g| g.0 == "small") && got.iter().any(|g| g.0 == "big" && g.1 == 2));
    drop(relay);
    ctx.cleanup().await;
}

pub(crate) fn stream_consumer(broker: &KafkaBroker, group: &str, topic: &str) -> StreamConsumer {
    let c: StreamConsumer = postbox_kafka::consumer_config(&broker.bootstrap(), group)
        .create()
        .unwrap();
    c.subscribe(&[topic]).unwrap();
    c
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_republish_and_consumer_crash_are_absorbed_by_the_inbox() {
    let ctx = Ctx::new("kinbox").await;
    let broker = KafkaBroker::start().await;
    broker.create_topic(&ctx.queue, 1);
    sqlx::raw_sql(&format!(
        "CREATE TABLE {}.effects (message_id text, traceparent text)",
        ctx.schema
    ))
    .execute(&ctx.pool)
    .await
    .unwrap();
    // Each event carries its producer's trace: the handler must see it.
    let tp = |i: usize| format!("00-4bf92f3577b34da6a3ce929d0e0e{i:04x}-00f067aa0ba902b7-01");
    ctx.produce(
        (1..=10)
            .map(|i| ctx.event("k", i).traceparent(tp(i)))
            .collect(),
    )
    .await;

    // Relay killed between produce and mark: the next one produces again.
    let mut doomed = relay(
        &ctx,
        &broker,
        &["--workers", "1"],
        &[("POSTBOX_FAILPOINT", "after_publish")],
    );
    doomed.wait_for_line("failpoint after_publish", LONG).await;
    doomed.signal("KILL");
    doomed.wait(LONG).await;
    assert_eq!(ctx.unsent().await, 10);
    let relay = relay(&ctx, &broker, &[], &[]);
    wait_until(LONG, "rows marked", || async { ctx.unsent().await == 0 }).await;
    let all = kafka_consume_independent(&broker.bootstrap(), &ctx.queue, 20, 60).await;
    assert_eq!(
        all.len(),
        20,
        "each event twice in the topic: duplicates at the broker"
    );

    // Consumer 1 crashes after the DB commit of the 3rd event, before its offset commit.
    let third: String = sqlx::query_scalar(&format!(
        "SELECT event_id::text FROM {}.outbox ORDER BY id OFFSET 2 LIMIT 1",
        ctx.schema
    ))
    .fetch_one(&ctx.pool)
    .await
    .unwrap();
    let inbox = postbox::Inbox::new(&ctx.schema).unwrap();
    let traceparent = |m: &postbox::Message| m.trace_context().map(|t| t.traceparent);
    let effects = Effects::new(&ctx.schema, traceparent, Some(third));
    let group = format!("g-{}", ctx.schema);
    {
        let (pool, inbox, e, c) = (
            ctx.pool.clone(),
            inbox.clone(),
            effects.clone(),
            stream_consumer(&broker, &group, &ctx.queue),
        );
        let task = tokio::spawn(async move {
            let inbox = postbox::InboxConsumer::new(pool, inbox, "effects");
            postbox_kafka::inbox_consumer(
                &inbox,
                &c,
                &*e,
                tokio_util::sync::CancellationToken::new(),
            )
            .await
        });
        tokio::time::timeout(LONG, effects.hung.notified())
            .await
            .expect("consumer reached the 3rd event");
        task.abort();
        let _ = task.await;
    }
    // Consumer 2 in the same group replays from the last committed offset.
    let effects2 = Effects::new(&ctx.schema, traceparent, None);
    let stop = tokio_util::sync::CancellationToken::new();
    let task = {
        let (pool, inbox, e, c, stop) = (
            ctx.pool.clone(),
            inbox.clone(),
            effects2.clone(),
            stream_consumer(&broker, &group, &ctx.queue),
            stop.clone(),
        );
        tokio::spawn(async move {
            let inbox = postbox::InboxConsumer::new(pool, inbox, "effects");
            postbox_kafka::inbox_consumer(&inbox, &c, &*e, stop).await
        })
    };
    let count = |pool: sqlx::PgPool, schema: String| async move {
        sqlx::query_scalar::<_, i64>(&format!("SELECT count(*) FROM {schema}.effects"))
            .fetch_one(&pool)
            .await
            .unwrap()
    };
    // 20 messages in the topic, 10 events: every one processed once, the rest
    // skipped. Consumer 2 starts at the 3rd event's offset, so it handles 18
    // messages and skips 11 of them; waiting for only 10 skips raced the last.
    wait_until(LONG, "all 20 messages handled", || {
        let d = effects2.duplicates.load(SeqCst);
        let c = count(ctx.pool.clone(), ctx.schema.clone());
        async move { c.await == 10 && d >= 11 }
    })
    .await;
    assert_eq!(
        count(ctx.pool.clone(), ctx.schema.clone()).await,
        10,
        "each effect exactly once"
    );
    assert!(
        effects2.duplicates.load(SeqCst) >= 11,
        "the replayed 3rd event was skipped too"
    );
    let mut traces: Vec<String> = sqlx::query_scalar(&format!(
        "SELECT coalesce(traceparent, 'none') FROM {}.effects",
        ctx.schema
    ))
    .fetch_all(&ctx.pool)
    .await
    .unwrap();
    traces.sort();
    let mut expected: Vec<String> = (1..=10).map(tp).collect();
    expected.sort();
    assert_eq!(traces, expected, "the handler saw each event's traceparent");
    stop.cancel();
    let _ = task.await;
    drop(relay);
    ctx.cleanup().await;
}

/// An event for a topic that was never created is refused as such (librdkafka
/// alone would wait for it and time out, which looks like an outage) and
/// dead-lettered, while every other key flows in the same batches.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_kafka_topic_is_dead_lettered_and_holds_no_other_key() {
    let ctx = Ctx::new("kmissing").await;
    let broker = KafkaBroker::start().await;
    broker.create_topic(&ctx.queue, 4);
    let missing = format!("{}-missing", ctx.queue);
    let mut events = Vec::new();
    for i in 0..200 {
        if i % 50 == 0 {
            events.push(event(&missing, &format!("m{}", i / 50), 1));
        }
        events.push(ctx.event(&format!("k{}", i % 20), i / 20 + 1));
    }
    ctx.produce(events).await;
    let relay = relay(&ctx, &broker, FAST_DEAD_LETTER, &[]);
    wait_until(
        LONG,
        "the good events sent, the missing topic's dead-lettered",
        || async { ctx.unsent().await == 0 && ctx.dead_letters().await.len() == 4 },
    )
    .await;
    for (_, error) in ctx.dead_letters().await {
        assert!(
            error.contains("does not exist")
                && error.contains(&missing)
                && error.contains("topic_map"),
            "{error}"
        );
    }
    let got = seqs(&kafka_consume_independent(&broker.bootstrap(), &ctx.queue, 200, 60).await);
    assert_eq!(got.len(), 200);
    drop(relay);
    ctx.cleanup().await;
}

/// A plain-SQL producer's malformed `traceparent` is not checked at enqueue:
/// the relay drops it, says so once, and delivers the event with its other
/// headers as text.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_traceparent_from_sql_is_dropped_and_the_event_delivered() {
    let ctx = Ctx::new("kbadtrace").await;
    let broker = KafkaBroker::start().await;
    broker.create_topic(&ctx.queue, 1);
    sqlx::query(&format!(
        "INSERT INTO {}.outbox (topic, event, key, payload, headers) VALUES ($1, 'test.event', 'k', '{{\"seq\": 1}}', '{{\"traceparent\": \"garbage\", \"tracestate\": \"a=b\", \"x-num\": 42}}')",
        ctx.schema
    ))
    .bind(&ctx.queue)
    .execute(&ctx.pool)
    .await
    .unwrap();
    let relay = relay(&ctx, &broker, &[], &[]);
    wait_until(LONG, "the event sent", || async { ctx.unsent().await == 0 }).await;
    assert!(ctx.dead_letters().await.is_empty());
    let msgs = kafka_consume_independent(&broker.bootstrap(), &ctx.queue, 1, 60).await;
    let headers = &msgs[0]["headers"];
    assert!(
        headers.get("traceparent").is_none() && headers.get("tracestate").is_none(),
        "{headers}"
    );
    assert_eq!(headers["x-num"], "42");
    relay.wait_for_line("without its trace context", LONG).await;
    drop(relay);
    ctx.cleanup().await;
}

/// Inserts each message's effect; holds the `hold_at`-th handled message
/// inside its transaction until the test has crashed PostgreSQL.
struct HeldEffects {
    insert: String,
    handled: AtomicUsize,
    hold_at: usize,
    holding: tokio::sync::Notify,
    release: tokio::sync::Notify,
}

impl postbox_kafka::Handler for HeldEffects {
    async fn handle(
        &self,
        tx: &mut sqlx::PgConnection,
        msg: &postbox_kafka::Message,
    ) -> Result<(), postbox_kafka::BoxError> {
        sqlx::query(&self.insert)
            .bind(&msg.id)
            .execute(&mut *tx)
            .await?;
        if self.handled.fetch_add(1, SeqCst) + 1 == self.hold_at {
            self.holding.notify_one();
            self.release.notified().await;
        }
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_consumer_survives_a_postgresql_crash_mid_stream() {
    let ctx = Ctx::new("kpgcrash").await;
    let broker = KafkaBroker::start().await;
    broker.create_topic(&ctx.queue, 1);
    ctx.produce(
        (1..=30)
            .map(|i| ctx.event(&format!("k{}", i % 3), i))
            .collect(),
    )
    .await;
    let relay = relay(&ctx, &broker, &[], &[]);
    wait_until(LONG, "rows marked", || async { ctx.unsent().await == 0 }).await;

    // The consumer's own database: a private cluster the test can crash.
    let pg = postbox_testkit::PgCluster::start().await.unwrap();
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(2)
        .acquire_timeout(Duration::from_secs(2))
        .connect(&pg.url())
        .await
        .unwrap();
    let schema = postbox::SchemaName::new("consumer_side").unwrap();
    postbox::migrate::run(
        &mut pool.acquire().await.unwrap(),
        &schema,
        Default::default(),
    )
    .await
    .unwrap();
    sqlx::raw_sql("CREATE TABLE consumer_side.effects (message_id text NOT NULL)")
        .execute(&pool)
        .await
        .unwrap();

    let effects = Arc::new(HeldEffects {
        insert: "INSERT INTO consumer_side.effects VALUES ($1)".into(),
        handled: AtomicUsize::new(0),
        hold_at: 12,
        holding: tokio::sync::Notify::new(),
        release: tokio::sync::Notify::new(),
    });
    let stop = tokio_util::sync::CancellationToken::new();
    let task = {
        let inbox = postbox::InboxConsumer::new(
            pool.clone(),
            postbox::Inbox::new("consumer_side").unwrap(),
            "effects",
        );
        let (e, c, stop) = (
            effects.clone(),
            stream_consumer(&broker, &format!("g-{}", ctx.schema), &ctx.queue),
            stop.clone(),
        );
        tokio::spawn(async move { postbox_kafka::inbox_consumer(&inbox, &c, &*e, stop).await })
    };
    // The 12th message is inside its transaction: crash the server under it,
    // so its COMMIT fails and the following messages find no database.
    tokio::time::timeout(LONG, effects.holding.notified())
        .await
        .expect("consumer reached the 12th message");
    pg.stop_immediate().await.unwrap();
    effects.release.notify_one();
    pg.up().await.unwrap();

    let count = |sql: &'static str| {
        let pool = pool.clone();
        async move {
            sqlx::query_scalar::<_, i64>(sql)
                .fetch_one(&pool)
                .await
                .unwrap_or(-1)
        }
    };
    wait_until(LONG, "all 30 effects committed", || async {
        count("SELECT count(DISTINCT message_id) FROM consumer_side.effects").await == 30
    })
    .await;
    assert_eq!(
        count("SELECT count(*) FROM consumer_side.effects").await,
        30,
        "no effect applied twice"
    );
    assert!(
        !task.is_finished(),
        "the consumer kept running through the outage"
    );
    stop.cancel();
    task.await.unwrap().unwrap();
    drop(relay);
    ctx.cleanup().await;
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
            "sink = \"bullmq\"\n\n[kafka]\nbrokers = \"{}\"\nvalue = \"envelope\"\nmessage_timeout = \"2s\"\n[kafka.topic_map]\n\"payment.completed\" = \"{kafka_topic}\"\n\n[[routes]]\ntopic = \"payment.*\"\nsink = \"kafka\"\n",
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
    assert_eq!(env["payload"], serde_json::json!({"amount": 42}));
    assert!(env["occurred_at"].is_string());
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
) -> Vec<postbox_relay::Encoded<'a, Vec<u8>>> {
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
