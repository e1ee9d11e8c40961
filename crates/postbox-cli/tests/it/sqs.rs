//! Amazon SQS and SNS: the relay's sinks against `moto` in server mode (a
//! local AWS of each test's own), read back by an independent client
//! (Python `boto3`), and the SQS inbox consumer.

use crate::support::*;
use postbox_sqs::aws_sdk_sqs;
use postbox_testkit::MotoServer;
use serde_json::Value;
use std::collections::{HashMap, HashSet};
use std::time::Duration;

fn relay(ctx: &Ctx, moto: &MotoServer, sink: &str, target: &str, extra: &[&str]) -> RelayProcess {
    let endpoint = moto.url();
    let (target_flag, region_flag, endpoint_flag) = match sink {
        "sqs" => ("--sqs-queue-url", "--sqs-region", "--sqs-endpoint-url"),
        _ => ("--sns-topic-arn", "--sns-region", "--sns-endpoint-url"),
    };
    let mut args = vec![
        "--sink",
        sink,
        target_flag,
        target,
        region_flag,
        "us-east-1",
        endpoint_flag,
        &endpoint,
    ];
    args.extend_from_slice(extra);
    let mut args_owned: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    let mut all = ctx.relay_args();
    all.append(&mut args_owned);
    let all: Vec<&str> = all.iter().map(String::as_str).collect();
    RelayProcess::spawn(BIN, &all, &MotoServer::env())
}

/// The test's own AWS configuration for `moto`, with its static credentials.
async fn aws(moto: &MotoServer) -> postbox_sqs::aws_config::SdkConfig {
    postbox_sqs::sdk_config(Some("us-east-1"), Some(&moto.url()))
        .await
        .into_builder()
        .credentials_provider(aws_sdk_sqs::config::SharedCredentialsProvider::new(
            aws_sdk_sqs::config::Credentials::new("test", "test", None, None, "moto"),
        ))
        .build()
}

async fn sqs(moto: &MotoServer) -> aws_sdk_sqs::Client {
    aws_sdk_sqs::Client::new(&aws(moto).await)
}

async fn create_queue(c: &aws_sdk_sqs::Client, name: &str) -> String {
    let mut q = c.create_queue().queue_name(name);
    if name.ends_with(".fifo") {
        q = q.attributes(aws_sdk_sqs::types::QueueAttributeName::FifoQueue, "true");
    }
    q.send().await.unwrap().queue_url().unwrap().to_owned()
}

/// An SNS topic `<name><suffix>` and an SQS queue `<name>-sub<suffix>`
/// subscribed to it with raw delivery (the attributes travel); `.fifo`
/// makes both FIFO. Returns (topic ARN, queue URL).
async fn topic_with_a_queue(moto: &MotoServer, name: &str, suffix: &str) -> (String, String) {
    let sns = postbox_sqs::aws_sdk_sns::Client::new(&aws(moto).await);
    let mut topic = sns.create_topic().name(format!("{name}{suffix}"));
    if suffix == ".fifo" {
        topic = topic.attributes("FifoTopic", "true");
    }
    let topic_arn = topic.send().await.unwrap().topic_arn().unwrap().to_owned();
    let queue = create_queue(&sqs(moto).await, &format!("{name}-sub{suffix}")).await;
    sns.subscribe()
        .topic_arn(&topic_arn)
        .protocol("sqs")
        .endpoint(format!(
            "arn:aws:sqs:us-east-1:123456789012:{name}-sub{suffix}"
        ))
        .attributes("RawMessageDelivery", "true")
        .send()
        .await
        .unwrap();
    (topic_arn, queue)
}

/// What boto3 read: at least `n` messages.
async fn boto3_read(moto: &MotoServer, queue_url: &str, n: usize) -> Vec<Value> {
    let python = std::env::var("POSTBOX_TEST_PYTHON")
        .expect("POSTBOX_TEST_PYTHON is not set: run the tests through ./scripts/test.sh");
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../tests/python/sqs_read.py"
    );
    let out = tokio::process::Command::new(python)
        .args([script, &moto.url(), queue_url, &n.to_string(), "30"])
        .output()
        .await
        .expect("run sqs_read.py");
    assert!(
        out.status.success(),
        "sqs_read.py: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqs_fifo_keeps_key_order_and_drops_re_sends_through_relay_kills() {
    let ctx = Ctx::new("sqsfifo").await;
    let moto = MotoServer::start().await;
    let client = sqs(&moto).await;
    let queue = create_queue(&client, &format!("{}.fifo", ctx.queue)).await;
    let tp = |i: usize| format!("00-4bf92f3577b34da6a3ce929d0e{i:06x}-00f067aa0ba902b7-01");
    const N: usize = 200;
    let mut seq: HashMap<String, usize> = HashMap::new();
    let mut events = Vec::new();
    for i in 0..N {
        let key = format!("k{}", i % 8);
        let s = seq.entry(key.clone()).or_default();
        *s += 1;
        events.push(ctx.event(&key, *s).traceparent(tp(i)));
    }
    ctx.produce(events).await;
    let target = format!("{}/123456789012/{{topic}}.fifo", moto.url());
    // moto answers a batch call in tens of milliseconds, slower under
    // concurrent relays: small batches, a long publish timeout.
    let args = ["--batch-size", "20", "--publish-timeout", "20s"];
    let mut doomed = relay(&ctx, &moto, "sqs", &target, &args);
    let r2 = relay(&ctx, &moto, "sqs", &target, &args);
    wait_until(LONG, "some events relayed", || async {
        ctx.unsent().await < (N as i64) * 3 / 4
    })
    .await;
    doomed.signal("KILL");
    doomed.wait(LONG).await;
    let r3 = relay(&ctx, &moto, "sqs", &target, &args);
    let deadline = std::time::Instant::now() + LONG;
    while ctx.unsent().await > 0 {
        // Say what was there, so a failure here can be read.
        assert!(
            std::time::Instant::now() < deadline,
            "every event relayed within {LONG:?}; unsent {}; relays:\n{}\n{}",
            ctx.unsent().await,
            r2.output(),
            r3.output()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let seen = boto3_read(&moto, &queue, N).await;
    let rows = ctx.rows_by_event_id().await;
    let mut first = FirstOccurrences::default();
    for m in &seen {
        let a = &m["attributes"];
        let id = a["postbox-event-id"].as_str().unwrap();
        let (key, s) = rows.get(id).expect("attribute = an outbox event id");
        assert_eq!(a["postbox-event"], "test.event");
        assert_eq!(m["groupId"], key.as_str(), "group = the event key");
        assert_eq!(m["dedupId"], id, "deduplication id = the event id");
        let headers: Value = serde_json::from_str(a["postbox-headers"].as_str().unwrap()).unwrap();
        assert!(headers["traceparent"].as_str().unwrap().starts_with("00-"));
        let body: Value = serde_json::from_str(m["body"].as_str().unwrap()).unwrap();
        assert_eq!(body["seq"], *s, "payload intact");
        first.see(id, key, *s);
    }
    assert_eq!(first.distinct(), N, "every event at least once");
    assert_eq!(seen.len(), N, "FIFO deduplication dropped every re-send");
    drop((r2, r3));
    ctx.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sns_reaches_a_subscribed_queue_with_every_attribute() {
    let ctx = Ctx::new("sns").await;
    let moto = MotoServer::start().await;
    let (topic_arn, queue) = topic_with_a_queue(&moto, &ctx.queue, "").await;
    ctx.produce(
        (1..=20)
            .map(|i| ctx.event(&format!("k{}", i % 4), i))
            .collect(),
    )
    .await;
    let relay = relay(&ctx, &moto, "sns", &topic_arn, &[]);
    wait_until(LONG, "every event published", || async {
        ctx.unsent().await == 0
    })
    .await;
    let seen = boto3_read(&moto, &queue, 20).await;
    let ids: HashSet<&str> = seen
        .iter()
        .filter_map(|m| m["attributes"]["postbox-event-id"].as_str())
        .collect();
    assert_eq!(ids.len(), 20, "every event, with its attributes: {seen:?}");
    assert!(seen
        .iter()
        .all(|m| m["attributes"]["postbox-key"].is_string()));
    drop(relay);
    ctx.cleanup().await;
}

/// A FIFO topic keeps each key's order for a FIFO queue subscribed to it,
/// and drops a re-send of the same event id (deduplication id) within its
/// window, as FIFO queues do.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sns_fifo_topic_keeps_key_order_and_drops_re_sends() {
    let ctx = Ctx::new("snsfifo").await;
    let moto = MotoServer::start().await;
    let (topic_arn, queue) = topic_with_a_queue(&moto, &ctx.queue, ".fifo").await;
    const N: usize = 40;
    ctx.produce(
        (0..N)
            .map(|i| ctx.event(&format!("k{}", i % 4), i / 4 + 1))
            .collect(),
    )
    .await;
    let relay = relay(&ctx, &moto, "sns", &topic_arn, &[]);
    wait_until(LONG, "every event published", || async {
        ctx.unsent().await == 0
    })
    .await;
    ctx.mark_first_unsent(10).await;
    wait_until(LONG, "the first ten published again", || async {
        ctx.unsent().await == 0
    })
    .await;
    let seen = boto3_read(&moto, &queue, N).await;
    let rows = ctx.rows_by_event_id().await;
    let mut first = FirstOccurrences::default();
    for m in &seen {
        let id = m["attributes"]["postbox-event-id"].as_str().unwrap();
        let (key, s) = rows.get(id).expect("attribute = an outbox event id");
        assert_eq!(m["groupId"], key.as_str(), "group = the event key");
        first.see(id, key, *s);
    }
    assert_eq!(first.distinct(), N, "every event");
    assert_eq!(seen.len(), N, "the ten re-sends dropped by deduplication");
    drop(relay);
    ctx.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqs_refusals_are_dead_lettered_while_other_keys_flow() {
    let ctx = Ctx::new("sqsbad").await;
    let moto = MotoServer::start().await;
    let client = sqs(&moto).await;
    let good = create_queue(&client, &ctx.queue).await;
    let absent = format!("{}-absent", ctx.queue);
    let mut events = Vec::new();
    for i in 1..=5 {
        for k in ["a", "b", "c"] {
            events.push(ctx.event(k, i));
        }
    }
    events.push(event(&absent, "x", 1));
    events.push(
        postbox::Event::new(
            &ctx.queue,
            "test.event",
            serde_json::json!({"key": "big", "seq": 1, "pad": "x".repeat(300 * 1024)}),
        )
        .key("big"),
    );
    ctx.produce(events).await;
    let target = format!("{}/123456789012/{{topic}}", moto.url());
    let relay = relay(&ctx, &moto, "sqs", &target, FAST_DEAD_LETTER);
    wait_until(LONG, "good events sent, refused ones dead", || async {
        ctx.unsent().await == 0
    })
    .await;
    let dead = ctx.dead_letters().await;
    assert_eq!(dead.len(), 2, "{dead:?}\n{}", relay.output());
    assert!(
        dead.iter()
            .any(|d| d.1.contains("does not exist") && d.1.contains(&absent)),
        "{dead:?}"
    );
    assert!(
        dead.iter().any(|d| d.1.contains("at most 262144")),
        "{dead:?}"
    );
    let seen = boto3_read(&moto, &good, 15).await;
    assert_eq!(seen.len(), 15, "every good event once");
    drop(relay);
    ctx.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqs_inbox_consumer_applies_each_message_once_across_a_crash() {
    let ctx = Ctx::new("sqsin").await;
    let moto = MotoServer::start().await;
    let client = sqs(&moto).await;
    let queue = create_queue(&client, &format!("{}.fifo", ctx.queue)).await;
    ctx.twenty_events_and_an_effects_table().await;
    let target = format!("{}/123456789012/{{topic}}.fifo", moto.url());
    let relay = relay(&ctx, &moto, "sqs", &target, &[]);
    let fifth = ctx.fifth_event_once_sent().await;
    let inbox = postbox::InboxConsumer::new(
        ctx.pool.clone(),
        postbox::Inbox::new(&ctx.schema).unwrap(),
        "effects",
    );
    let key = |m: &postbox::Message| m.key.clone();
    let options = postbox_sqs::ConsumerOptions {
        wait: Duration::from_secs(1),
        visibility: Duration::from_secs(2),
        ..Default::default()
    };
    // Consumer 1 dies after the inbox commit of the 5th message, before its delete.
    let first = Effects::new(&ctx.schema, key, Some(fifth));
    {
        let (inbox, e, c, q, o) = (
            inbox.clone(),
            first.clone(),
            client.clone(),
            queue.clone(),
            options.clone(),
        );
        let task = tokio::spawn(async move {
            postbox_sqs::inbox_consumer(&inbox, &c, &q, &*e, o, Default::default()).await
        });
        tokio::time::timeout(LONG, first.hung.notified())
            .await
            .expect("consumer reached the 5th message");
        task.abort();
        let _ = task.await;
    }
    // Its messages reappear after their visibility timeout; the inbox skips the 5th.
    let second = Effects::new(&ctx.schema, key, None);
    let stop = postbox_sqs::CancellationToken::new();
    let consume =
        postbox_sqs::inbox_consumer(&inbox, &client, &queue, &*second, options, stop.clone());
    recovers_once(&ctx, &second, 20, &stop, consume).await;
    drop(relay);
    ctx.cleanup().await;
}
