//! The answer mapping, with the client's real errors and statuses.

use super::*;
use reqwest::StatusCode;
use std::io::{Read, Write};

fn status(code: u16) -> StatusCode {
    StatusCode::from_u16(code).expect("an HTTP status")
}

/// The sink's own HTTP client (the default redirect policy, same host).
fn client(timeout: Duration) -> reqwest::Client {
    let config = WebhookConfig {
        url: "http://127.0.0.1/hooks".into(),
        secrets: vec![postbox_relay::Secret::new(
            "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
        )],
        timeout,
        ..Default::default()
    };
    WebhookSink::new(config).expect("a valid config").client
}

#[test]
fn a_receiver_busy_or_failing_is_transient() {
    for code in [408, 429, 500, 502, 503, 504, 599] {
        assert!(
            refused(status(code), "POST".into()).is_transient(),
            "{code}"
        );
    }
}

#[test]
fn a_redirect_answer_is_a_refusal_naming_the_setting() {
    for code in [301, 302, 303, 307, 308] {
        match refused(status(code), "POST".into()) {
            SinkError::Rejected { message, .. } => {
                assert!(message.contains("webhook.redirects"), "{code}: {message}")
            }
            other => panic!("{code}: {other:?}"),
        }
    }
}

#[test]
fn any_other_status_is_a_refusal_of_that_event() {
    for code in [400, 401, 403, 404, 405, 409, 410, 413, 415, 422, 451] {
        assert!(refused(status(code), "POST".into()).is_rejected(), "{code}");
    }
}

#[tokio::test]
async fn a_refused_connection_is_transient() {
    let port = postbox_testkit::free_port();
    let e = client(Duration::from_secs(5))
        .post(format!("http://127.0.0.1:{port}/hooks"))
        .send()
        .await
        .expect_err("nothing listens on a port just freed");
    assert!(e.is_connect(), "{e}");
    assert!(unanswered(e, "http://127.0.0.1/hooks").is_transient());
}

#[tokio::test]
async fn a_receiver_that_does_not_answer_in_time_is_transient() {
    // Connections are taken (the listen backlog) but never answered.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").expect("a port");
    let port = silent.local_addr().expect("its address").port();
    let e = client(Duration::from_millis(100))
        .post(format!("http://127.0.0.1:{port}/hooks"))
        .send()
        .await
        .expect_err("no answer within the timeout");
    assert!(e.is_timeout(), "{e}");
    assert!(unanswered(e, "http://127.0.0.1/hooks").is_transient());
}

#[tokio::test]
async fn a_redirect_the_policy_refuses_is_a_refusal_of_that_event() {
    // A receiver that sends every request to another host.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a port");
    let port = listener.local_addr().expect("its address").port();
    std::thread::spawn(move || {
        if let Ok((mut stream, _)) = listener.accept() {
            let mut request = [0u8; 4096];
            let _ = stream.read(&mut request);
            let _ = stream.write_all(
                b"HTTP/1.1 302 Found\r\nLocation: http://elsewhere.example/hooks\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
            );
        }
    });
    let e = client(Duration::from_secs(5))
        .post(format!("http://127.0.0.1:{port}/hooks"))
        .send()
        .await
        .expect_err("the same-host policy does not follow it");
    assert!(e.is_redirect(), "{e}");
    match unanswered(e, "http://127.0.0.1/hooks") {
        SinkError::Rejected { message, .. } => {
            assert!(message.contains("webhook.redirects"), "{message}")
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn only_receivers_with_a_fixed_host_are_checked() {
    let mut c = WebhookConfig {
        url: "https://hooks.example.com/{topic}".into(),
        ..Default::default()
    };
    c.topics
        .insert("a".into(), "http://[::1]:8080/in/{key}".into());
    c.topics
        .insert("b".into(), "https://{topic}.example.com/".into());
    c.topics
        .insert("c".into(), "https://hooks.example.com:443/other".into());
    assert_eq!(
        fixed_hosts(&c),
        [
            ("::1".to_owned(), 8080),
            ("hooks.example.com".to_owned(), 443)
        ]
    );
}
