//! The classifier, with the client's real error values.

use super::*;
use lapin::protocol::AMQPError;

/// The broker closing the channel or connection with `code`, as lapin
/// reports it.
fn closed_with(code: u16, text: &str) -> lapin::Error {
    let amqp = AMQPError::from_id(code, text.into()).expect("an AMQP reply code");
    lapin::ErrorKind::ProtocolError(amqp).into()
}

#[test]
fn a_missing_exchange_is_a_refusal_of_that_event() {
    let e = closed_with(404, "NOT_FOUND - no exchange 'orders' in vhost '/'");
    assert_eq!(reply_code(&e), Some(404));
    assert!(classify(&e, "publishing").is_rejected());
}

#[test]
fn access_refused_is_a_refusal_of_that_event() {
    let e = closed_with(
        403,
        "ACCESS_REFUSED - write access to exchange 'orders' in vhost '/' refused for user 'relay'",
    );
    assert!(classify(&e, "publishing").is_rejected());
}

#[test]
fn a_failed_precondition_like_message_too_large_is_a_refusal_of_that_event() {
    let e = closed_with(
        406,
        "PRECONDITION_FAILED - message size 20000 is larger than configured max size 16384",
    );
    assert!(classify(&e, "awaiting a confirm").is_rejected());
}

#[test]
fn any_other_reply_code_is_transient() {
    for (code, text) in [
        (
            320,
            "CONNECTION_FORCED - broker forced connection closure with reason 'shutdown'",
        ),
        (
            405,
            "RESOURCE_LOCKED - cannot obtain exclusive access to locked queue",
        ),
        (311, "CONTENT_TOO_LARGE"),
        (501, "FRAME_ERROR"),
        (504, "CHANNEL_ERROR - expected 'channel.open'"),
        (506, "RESOURCE_ERROR"),
        (
            530,
            "NOT_ALLOWED - access to vhost '/' refused for user 'relay'",
        ),
        (541, "INTERNAL_ERROR"),
    ] {
        let e = closed_with(code, text);
        assert_eq!(reply_code(&e), Some(code));
        assert!(classify(&e, "publishing").is_transient(), "{code}");
    }
}

#[tokio::test]
async fn a_refused_connection_is_transient() {
    let port = postbox_testkit::free_port();
    let e = Connection::connect(
        &format!("amqp://127.0.0.1:{port}/%2f"),
        ConnectionProperties::default(),
    )
    .await
    .expect_err("nothing listens on a port just freed");
    assert!(e.is_io_error(), "{e}");
    assert_eq!(reply_code(&e), None);
    assert!(classify(&e, "connecting").is_transient());
}

/// The server refusing the login (403 ACCESS_REFUSED) is the broker's
/// answer to the relay, not to an event: no attempt may be counted.
#[tokio::test]
async fn wrong_credentials_are_an_outage_not_a_refusal_of_events() {
    let url = postbox_testkit::rabbitmq_url().replacen("guest:guest", "guest:wrong", 1);
    let sink = RabbitmqSink::new(RabbitmqConfig {
        url: postbox_relay::Secret::new(&url),
        ..RabbitmqConfig::default()
    })
    .unwrap();
    let e = sink.check().await.expect_err("the login is refused");
    assert!(e.is_transient(), "connecting is never an event's fault");
}

#[test]
fn an_error_without_a_reply_code_is_transient() {
    use std::io::ErrorKind as K;
    let errors: Vec<lapin::Error> = vec![
        std::io::Error::from(K::ConnectionReset).into(),
        std::io::Error::from(K::BrokenPipe).into(),
        lapin::ErrorKind::MissingHeartbeatError.into(),
        lapin::ErrorKind::ChannelsLimitReached.into(),
        lapin::ErrorKind::InvalidChannelState(lapin::ChannelState::Closed, "basic.publish").into(),
        lapin::ErrorKind::InvalidConnectionState(lapin::ConnectionState::Closed).into(),
    ];
    for e in errors {
        assert_eq!(reply_code(&e), None, "{e}");
        assert!(classify(&e, "publishing").is_transient(), "{e}");
    }
}
