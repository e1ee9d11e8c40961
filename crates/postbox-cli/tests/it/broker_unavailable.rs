//! A broker the relay cannot reach is named at once, with the cause and its
//! address (password hidden), for every sink, even with nothing pending; and
//! its return is logged.

use crate::support::*;
use postbox_testkit::MotoServer;

/// Each sink's flags pointing at `addr`, where nothing listens.
fn unreachable(sink: &str, addr: &str) -> Vec<String> {
    let flags: Vec<String> = match sink {
        "bullmq" => vec!["--redis-url".into(), format!("redis://:hunter2@{addr}")],
        "redis_streams" => vec![
            "--redis-streams-url".into(),
            format!("redis://:hunter2@{addr}"),
        ],
        // Each sink's own timeout under the tests' 3 s publish_timeout.
        "kafka" => vec![
            "--kafka-brokers".into(),
            addr.into(),
            "--kafka-message-timeout".into(),
            "2s".into(),
        ],
        "rabbitmq" => vec![
            "--rabbitmq-url".into(),
            format!("amqp://guest:hunter2@{addr}/%2f"),
        ],
        "nats" => vec![
            "--nats-url".into(),
            format!("nats://{addr}"),
            "--nats-ack-timeout".into(),
            "2s".into(),
        ],
        "webhook" => vec![
            "--webhook-url".into(),
            format!("http://{addr}/in/{{topic}}"),
            "--webhook-secrets".into(),
            "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw".into(),
            "--webhook-timeout".into(),
            "2s".into(),
        ],
        "sqs" => vec![
            "--sqs-endpoint-url".into(),
            format!("http://{addr}"),
            "--sqs-region".into(),
            "us-east-1".into(),
            "--sqs-queue-url".into(),
            format!("http://{addr}/000000000000/orders"),
        ],
        "sns" => vec![
            "--sns-endpoint-url".into(),
            format!("http://{addr}"),
            "--sns-region".into(),
            "us-east-1".into(),
            "--sns-topic-arn".into(),
            "arn:aws:sns:us-east-1:000000000000:{topic}".into(),
        ],
        other => panic!("say how sink {other:?} is pointed at nothing in this test"),
    };
    [vec!["--sink".to_owned(), sink.to_owned()], flags].concat()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_sink_names_a_broker_it_cannot_reach() {
    let ctx = Ctx::new("unavail").await;
    let sinks = [
        "bullmq",
        "redis_streams",
        "kafka",
        "rabbitmq",
        "nats",
        "webhook",
        "sqs",
        "sns",
    ];
    let relays: Vec<(&str, String, RelayProcess)> = sinks
        .iter()
        .map(|sink| {
            let addr = format!("127.0.0.1:{}", postbox_testkit::free_port());
            let mut args = ctx.relay_args();
            args.extend(unreachable(sink, &addr));
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            (
                *sink,
                addr,
                RelayProcess::spawn(BIN, &args, &MotoServer::env()),
            )
        })
        .collect();
    for (sink, addr, relay) in &relays {
        relay
            .wait_for_line(&format!("{sink} unavailable"), LONG)
            .await;
        let out = relay.output();
        let line = out
            .lines()
            .find(|l| l.contains(&format!("{sink} unavailable")))
            .unwrap();
        assert!(line.contains(addr.as_str()), "{sink}: no address: {line}");
        assert!(
            !out.contains("hunter2"),
            "{sink}: a password in the log:\n{out}"
        );
        // Kafka's client reports a timeout, not the socket's error.
        if *sink != "kafka" {
            assert!(
                line.to_lowercase().contains("refused"),
                "{sink}: not the cause: {line}"
            );
        }
    }
    drop(relays);
    ctx.cleanup().await;
}

/// An outage and the broker's return are logged once each, while idle.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_outage_and_its_end_are_logged_once() {
    let ctx = Ctx::new("unavail_back").await;
    let mut redis = RedisServer::start().await;
    let url = redis.url();
    let relay = ctx.relay(
        &url,
        &["--sink", "redis_streams", "--redis-streams-url", &url],
        &[],
    );
    relay.wait_for_line("redis_streams reachable:", LONG).await;
    redis.kill();
    relay.wait_for_line("redis_streams unavailable", LONG).await;
    redis.restart().await;
    relay
        .wait_for_line("redis_streams reachable again after", LONG)
        .await;
    // The outage was logged before its end: once, however many checks failed.
    assert_eq!(
        relay.output().matches("redis_streams unavailable").count(),
        1,
        "{}",
        relay.output()
    );
    drop(relay);
    ctx.cleanup().await;
}

/// `relay --check` (as `nginx -t`): settings, PostgreSQL and the broker, each
/// reported with its cause; non-zero on any failure.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_reports_the_settings_the_database_and_the_broker() {
    use crate::bad_input::relay_output;
    let ctx = Ctx::new("check").await;
    let db = postbox_testkit::database_url();
    let redis = postbox_testkit::redis_url();
    let base = ["--check", "--database-url", &db, "--schemas", &ctx.schema];

    let (ok, out) = relay_output(&[&base[..], &["--redis-url", &redis]].concat(), &[]);
    assert!(ok, "{out}");
    assert!(out.contains("ok    settings"), "{out}");
    assert!(
        out.contains("ok    PostgreSQL at") && out.contains(&ctx.schema),
        "{out}"
    );
    assert!(out.contains("ok    bullmq reachable"), "{out}");

    // A broker nobody listens on, and a schema nobody migrated: both named.
    let closed = format!(
        "redis://:hunter2@127.0.0.1:{}",
        postbox_testkit::free_port()
    );
    let (ok, out) = relay_output(
        &[
            "--check",
            "--database-url",
            &db,
            "--schemas",
            &format!("{}_none", ctx.schema),
            "--redis-url",
            &closed,
        ],
        &[],
    );
    assert!(!ok, "{out}");
    assert!(
        out.contains("FAIL  PostgreSQL") && out.contains("postbox migrate"),
        "{out}"
    );
    assert!(
        out.contains("FAIL  bullmq") && out.to_lowercase().contains("refused"),
        "{out}"
    );
    assert!(
        out.contains("2 check(s) failed") && !out.contains("hunter2"),
        "{out}"
    );

    // A rule between settings: refused before connecting to anything.
    let (ok, out) = relay_output(
        &[
            &base[..],
            &[
                "--sink",
                "webhook",
                "--webhook-url",
                "http://127.0.0.1:1/x",
                "--webhook-secrets",
                "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
                "--webhook-timeout",
                "20s",
            ],
        ]
        .concat(),
        &[],
    );
    assert!(!ok && out.contains("webhook.timeout"), "{out}");
    assert!(!out.contains("ok    settings"), "{out}");
    ctx.cleanup().await;
}
