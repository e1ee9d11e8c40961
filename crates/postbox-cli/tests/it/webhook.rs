//! HTTP webhooks: the relay's sink against a receiver that checks every
//! signature with the Standard Webhooks reference package (Node
//! `standardwebhooks`), receivers that fail, hang, are slow or busy,
//! `https://` behind a private CA, and the Rust receiver helper with the inbox.

use crate::support::*;
use postbox_testkit::WebhookReceiver as Receiver;
use serde_json::Value;
use std::collections::HashSet;
use std::sync::Arc;

pub(crate) const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

fn relay(ctx: &Ctx, url: &str, extra: &[&str]) -> RelayProcess {
    let mut args = vec![
        "--sink",
        "webhook",
        "--webhook-url",
        url,
        "--webhook-secrets",
        SECRET,
        "--webhook-timeout",
        "1s",
    ];
    args.extend_from_slice(extra);
    ctx.relay_with(&args, &[])
}

async fn attempts(ctx: &Ctx, topic: &str) -> i64 {
    sqlx::query_scalar(&format!(
        "SELECT coalesce(max(attempts), 0)::bigint FROM {}.outbox WHERE topic = $1",
        ctx.schema
    ))
    .bind(topic)
    .fetch_one(&ctx.pool)
    .await
    .unwrap()
}

/// A receiver answering 500 then 200 is asked twice for each event, which
/// is delivered with no attempt counted; the signing secret is never logged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_5xx_is_retried_without_burning_attempts_and_the_secret_never_logged() {
    let ctx = Ctx::new("hookflaky").await;
    let rx = Receiver::start(SECRET, None).await;
    ctx.produce((1..=3).map(|i| ctx.event("f", i)).collect())
        .await;
    let url = format!("http://127.0.0.1:{}/flaky/{{topic}}/{{key}}", rx.port);
    let relay = relay(&ctx, &url, FAST_DEAD_LETTER);
    wait_until(LONG, "every event delivered", || async {
        ctx.unsent().await == 0
    })
    .await;
    // Its last line may still be on its way from the receiver.
    let flaky = rx.wait_for("flaky", 6, LONG).await;
    let ids: HashSet<&str> = flaky.iter().filter_map(|r| r["id"].as_str()).collect();
    assert_eq!(ids.len(), 3);
    assert_eq!(flaky.len(), 6, "each asked twice: {flaky:?}");
    assert!(flaky.iter().all(|r| r["verified"] == true), "{flaky:?}");
    assert_eq!(attempts(&ctx, &ctx.queue).await, 0);
    assert!(ctx.dead_letters().await.is_empty());
    assert!(
        !relay.output().contains("MfKQ9r8"),
        "the secret is never logged"
    );
    drop(relay);
    ctx.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hanging_receiver_costs_no_attempts_and_holds_no_other_topic() {
    let ctx = Ctx::new("hookhang").await;
    let rx = Receiver::start(SECRET, None).await;
    let hang = format!("{}-hang", ctx.queue);
    let mut events = vec![event(&hang, "h", 1), event(&hang, "h", 2)];
    for i in 1..=5 {
        events.push(ctx.event("a", i));
    }
    ctx.produce(events).await;
    let base = format!("http://127.0.0.1:{}", rx.port);
    let over = format!("{hang}={base}/hang/{{topic}}");
    let relay = relay(
        &ctx,
        &format!("{base}/ok/{{topic}}/{{key}}"),
        &["--webhook-topics", &over],
    );
    wait_until(LONG, "the other topic's events delivered", || async {
        ctx.unsent().await == 2
    })
    .await;
    wait_until(LONG, "the hanging receiver asked again", || async {
        rx.seen("hang").len() >= 2
    })
    .await;
    assert_eq!(attempts(&ctx, &hang).await, 0, "timeouts are transient");
    assert!(ctx.dead_letters().await.is_empty());
    assert_eq!(
        rx.seen("hang")
            .iter()
            .filter_map(|r| r["key"].as_str())
            .collect::<HashSet<_>>()
            .len(),
        1
    );
    assert!(
        rx.seen("hang")
            .iter()
            .all(|r| r["body"].as_str().unwrap().contains("\"seq\":1")),
        "the key's second event waits behind its first"
    );
    assert_eq!(rx.seen("ok").len(), 5);
    drop(relay);
    ctx.cleanup().await;
}

/// A receiver too slow for a whole batch within `publish_timeout` (one key,
/// 40 requests of 100 ms each against the tests' 3 s): what it acknowledged
/// in time is kept, so the batch drains over a few passes instead of being
/// sent again from its first event forever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_outlasting_publish_timeout_keeps_what_was_acknowledged() {
    let ctx = Ctx::new("hookslow").await;
    let rx = Receiver::start(SECRET, None).await;
    const N: usize = 40;
    ctx.produce((1..=N).map(|i| ctx.event("k", i)).collect())
        .await;
    let url = format!("http://127.0.0.1:{}/slow/{{topic}}/{{key}}", rx.port);
    let relay = relay(&ctx, &url, &[]);
    wait_until(LONG, "every event delivered", || async {
        ctx.unsent().await == 0
    })
    .await;
    let seen = rx.seen("slow");
    let seqs: Vec<i64> = seen
        .iter()
        .map(|r| {
            let body: Value = serde_json::from_str(r["body"].as_str().unwrap()).unwrap();
            body["seq"].as_i64().unwrap()
        })
        .collect();
    // At most the send each cut-off pass interrupted goes twice.
    assert!(
        (N..N + 3).contains(&seqs.len()),
        "{} requests for {N} events: {seqs:?}",
        seqs.len()
    );
    assert!(
        seqs.windows(2).all(|w| w[1] == w[0] || w[1] == w[0] + 1),
        "{seqs:?}"
    );
    assert_eq!(
        attempts(&ctx, &ctx.queue).await,
        0,
        "cut-off sends are transient"
    );
    drop(relay);
    ctx.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_429_retry_after_is_honoured_without_burning_attempts() {
    let ctx = Ctx::new("hookbusy").await;
    let rx = Receiver::start(SECRET, None).await;
    ctx.produce(vec![ctx.event("a", 1)]).await;
    let url = format!("http://127.0.0.1:{}/busy/{{topic}}/{{key}}", rx.port);
    let relay = relay(&ctx, &url, &[]);
    wait_until(LONG, "delivered after the wait", || async {
        ctx.unsent().await == 0
    })
    .await;
    let busy = rx.seen("busy");
    assert_eq!(
        busy.len(),
        2,
        "asked once, then once after the wait: {busy:?}"
    );
    let waited = busy[1]["at"].as_i64().unwrap() - busy[0]["at"].as_i64().unwrap();
    assert!(
        waited >= 1900,
        "the relay came back after {waited} ms, before Retry-After: 2"
    );
    assert_eq!(attempts(&ctx, &ctx.queue).await, 0);
    drop(relay);
    ctx.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_behind_a_private_ca_is_trusted_only_with_its_ca_file() {
    let ctx = Ctx::new("hooktls").await;
    let dir = std::env::temp_dir().join(format!("postbox-hook-ca-{}", postbox_testkit::suffix()));
    postbox_testkit::private_ca(&dir);
    let rx = Receiver::start(SECRET, Some(&dir)).await;
    ctx.produce((1..=3).map(|i| ctx.event("a", i)).collect())
        .await;
    let url = format!("https://127.0.0.1:{}/ok/{{topic}}/{{key}}", rx.port);
    // Without the CA: the certificate is not trusted; rows wait, nothing dead.
    let untrusted = relay(&ctx, &url, &[]);
    wait_until(LONG, "a refused handshake logged", || async {
        untrusted.output().contains("broker unavailable")
    })
    .await;
    assert_eq!(ctx.unsent().await, 3);
    assert!(rx.seen("ok").is_empty());
    drop(untrusted);
    let ca = dir.join("ca.pem");
    let trusted = relay(&ctx, &url, &["--webhook-ca-file", ca.to_str().unwrap()]);
    wait_until(LONG, "delivered over TLS", || async {
        ctx.unsent().await == 0
    })
    .await;
    assert_eq!(rx.seen("ok").len(), 3);
    assert!(rx.seen("ok").iter().all(|r| r["verified"] == true));
    drop(trusted);
    std::fs::remove_dir_all(&dir).unwrap();
    ctx.cleanup().await;
}

/// The receiving side in Rust: the helper verifies, the inbox applies each
/// event once, a forged request gets 401.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rust_receiver_verifies_and_applies_each_event_once() {
    use axum::body::Bytes;
    use axum::http::HeaderMap;
    let ctx = Ctx::new("hookrx").await;
    ctx.effects_table().await;
    let verifier = postbox_webhook::Verifier::new(&[SECRET]).unwrap();
    let inbox = postbox::InboxConsumer::new(
        ctx.pool.clone(),
        postbox::Inbox::new(&ctx.schema).unwrap(),
        "hooks",
    );
    let effects = Effects::new(&ctx.schema, None);
    let state = Arc::new((verifier, inbox, effects.clone()));
    let app = axum::Router::new()
        .route(
            "/hook",
            axum::routing::post(
                |axum::extract::State(s): axum::extract::State<
                    Arc<(
                        postbox_webhook::Verifier,
                        postbox::InboxConsumer,
                        Arc<Effects>,
                    )>,
                >,
                 headers: HeaderMap,
                 body: Bytes| async move {
                    let stop = postbox::CancellationToken::new();
                    postbox_webhook::receive(&s.0, &s.1, &*s.2, &headers, &body, &stop)
                        .await
                        .status()
                },
            ),
        )
        .with_state(state);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move { axum::serve(listener, app).await });

    ctx.produce((1..=10).map(|i| ctx.event("k", i)).collect())
        .await;
    let relay = relay(&ctx, &format!("http://127.0.0.1:{port}/hook"), &[]);
    wait_until(LONG, "every event delivered", || async {
        ctx.unsent().await == 0
    })
    .await;
    // The relay sends the first five again (as after a crash before its COMMIT).
    ctx.mark_first_unsent(5).await;
    wait_until(LONG, "re-sent and skipped", || async {
        ctx.unsent().await == 0 && effects.duplicates() >= 5
    })
    .await;
    let applied: i64 = sqlx::query_scalar(&format!("SELECT count(*) FROM {}.effects", ctx.schema))
        .fetch_one(&ctx.pool)
        .await
        .unwrap();
    assert_eq!(applied, 10, "each effect once");
    // A forged request: right headers, wrong key.
    let forged = postbox_webhook::SigningKey::from_secret(
        "whsec_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=",
    )
    .unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    let body = br#"{"key":"k","seq":99}"#;
    let mut headers = HeaderMap::new();
    headers.insert("webhook-id", "forged-1".parse().unwrap());
    headers.insert("webhook-timestamp", now.to_string().parse().unwrap());
    headers.insert(
        "webhook-signature",
        forged.sign("forged-1", now, body).parse().unwrap(),
    );
    let v = postbox_webhook::Verifier::new(&[SECRET]).unwrap();
    assert!(matches!(
        v.verify(&headers, body),
        Err(postbox_webhook::VerifyError::NoMatch)
    ));
    headers.insert(
        "webhook-signature",
        postbox_webhook::SigningKey::from_secret(SECRET)
            .unwrap()
            .sign("forged-1", now - 3600, body)
            .parse()
            .unwrap(),
    );
    headers.insert(
        "webhook-timestamp",
        (now - 3600).to_string().parse().unwrap(),
    );
    assert!(matches!(
        v.verify(&headers, body),
        Err(postbox_webhook::VerifyError::Stale { .. })
    ));
    drop(relay);
    ctx.cleanup().await;
}

/// A receiver with default settings and a handler that always fails answers
/// within the relay's webhook timeout (5 s): the message is kept as a
/// consumer dead letter and answered 204, so the relay moves the key on
/// rather than cutting the request off, sending it again and starting the
/// retries over, forever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_default_receiver_ends_a_failing_handler_within_the_relays_timeout() {
    struct AlwaysFails;
    impl postbox::Handler for AlwaysFails {
        async fn handle(
            &self,
            _tx: &mut postbox::sqlx::PgConnection,
            _msg: &postbox::Message,
        ) -> Result<(), postbox::BoxError> {
            Err("the handler always fails".into())
        }
    }
    let ctx = Ctx::new("hookfail").await;
    let verifier = postbox_webhook::Verifier::new(&[SECRET]).unwrap();
    let inbox = postbox::InboxConsumer::new(
        ctx.pool.clone(),
        postbox::Inbox::new(&ctx.schema).unwrap(),
        "hooks",
    );
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    let body = br#"{"key":"k","seq":1}"#;
    let id = "0190d6a4-7a5e-7c1e-9d1e-1a2b3c4d5e6f";
    let mut headers = axum::http::HeaderMap::new();
    headers.insert("webhook-id", id.parse().unwrap());
    headers.insert("webhook-timestamp", now.to_string().parse().unwrap());
    headers.insert(
        "webhook-signature",
        postbox_webhook::SigningKey::from_secret(SECRET)
            .unwrap()
            .sign(id, now, body)
            .parse()
            .unwrap(),
    );
    let started = std::time::Instant::now();
    let stop = postbox::CancellationToken::new();
    let received =
        postbox_webhook::receive(&verifier, &inbox, &AlwaysFails, &headers, body, &stop).await;
    let took = started.elapsed();
    assert_eq!(received.status(), 204, "{received:?}");
    assert!(
        matches!(
            received,
            postbox_webhook::Received::Done(postbox::Processed::DeadLettered)
        ),
        "{received:?}"
    );
    assert!(
        took < std::time::Duration::from_millis(4500),
        "took {took:?}"
    );
    let kept: i64 = sqlx::query_scalar(&format!(
        "SELECT count(*) FROM {}.inbox_dead_letter WHERE consumer = 'hooks' AND message_id = $1",
        ctx.schema
    ))
    .bind(id)
    .fetch_one(&ctx.pool)
    .await
    .unwrap();
    assert_eq!(kept, 1);
    ctx.cleanup().await;
}
