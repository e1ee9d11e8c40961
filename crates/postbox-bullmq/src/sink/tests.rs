//! The classifier, with the client's real error values.

use super::*;
use bullmq::Error as E;

/// An error reply as redis-rs reads it off the wire (`-CODE detail`).
fn reply(line: &str) -> redis::RedisError {
    redis::parse_redis_value(format!("-{line}\r\n").as_bytes())
        .expect("a RESP error reply")
        .extract_error()
        .expect_err("an error reply is an error")
}

fn io(kind: std::io::ErrorKind) -> redis::RedisError {
    std::io::Error::from(kind).into()
}

/// What redis-rs returns when nothing listens on the port.
async fn refused() -> redis::RedisError {
    let port = postbox_testkit::free_port();
    redis::Client::open(format!("redis://127.0.0.1:{port}/"))
        .expect("a valid URL")
        .get_multiplexed_async_connection()
        .await
        .expect_err("nothing listens on a port just freed")
}

#[test]
fn an_err_reply_to_the_add_script_is_a_refusal_of_that_job() {
    let e = reply("ERR user_script:1: Script attempted to access nonexistent global variable 'x' script: 1a2b, on @user_script:1.");
    assert_eq!(e.code(), Some("ERR"));
    assert!(classify(E::Redis(e), "adding job").is_rejected());
}

#[test]
fn a_queue_key_of_another_type_is_a_refusal_of_that_job() {
    let e = reply("WRONGTYPE Operation against a key holding the wrong kind of value");
    assert_eq!(e.code(), Some("WRONGTYPE"));
    assert!(classify(E::Redis(e), "adding job").is_rejected());
}

#[test]
fn any_other_error_reply_is_the_servers_state_and_transient() {
    for line in [
        "LOADING Redis is loading the dataset in memory",
        "READONLY You can't write against a read only replica.",
        "OOM command not allowed when used memory > 'maxmemory'.",
        "BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSCRIPT.",
        "NOSCRIPT No matching script. Please use EVAL.",
        "MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'.",
        "TRYAGAIN Multiple keys request during rehashing of slot",
        "CLUSTERDOWN The cluster is down",
        "EXECABORT Transaction discarded because of previous errors.",
        "NOAUTH Authentication required.",
        "WRONGPASS invalid username-password pair or user is disabled.",
        "NOPERM User default has no permissions to run the 'evalsha' command",
        "ERR max number of clients reached",
    ] {
        assert!(
            classify(E::Redis(reply(line)), "adding job").is_transient(),
            "{line}"
        );
    }
}

#[tokio::test]
async fn a_refused_connection_is_transient_and_fails_a_transaction() {
    let e = refused().await;
    assert!(e.is_connection_refusal(), "{e}");
    assert!(is_connection_error(&E::Redis(e.clone())));
    assert!(classify(E::Redis(e), "cannot connect").is_transient());
}

#[test]
fn a_dropped_or_timed_out_connection_is_transient_and_fails_a_transaction() {
    use std::io::ErrorKind as K;
    let errors = [
        io(K::ConnectionReset),
        io(K::BrokenPipe),
        io(K::UnexpectedEof),
        io(K::TimedOut),
        io(K::Other),
        (
            redis::ErrorKind::Io,
            "Multiplexed connection driver unexpectedly terminated",
        )
            .into(),
    ];
    for e in errors {
        assert!(is_connection_error(&E::Redis(e.clone())), "{e}");
        assert!(classify(E::Redis(e), "adding job").is_transient());
    }
}

#[test]
fn an_error_reply_inside_a_transaction_is_unclear_not_a_failed_connection() {
    for line in [
        "ERR user_script:1: bad argument",
        "WRONGTYPE Operation against a key holding the wrong kind of value",
        "OOM command not allowed when used memory > 'maxmemory'.",
        "EXECABORT Transaction discarded because of previous errors.",
    ] {
        assert!(!is_connection_error(&E::Redis(reply(line))), "{line}");
    }
    assert!(!is_connection_error(&E::ConnectionClosed));
    assert!(!is_connection_error(&E::from_script_code(-1)));
}

#[test]
fn a_job_the_crate_cannot_encode_or_its_script_refuses_is_a_refusal_of_that_job() {
    let not_json = serde_json::from_str::<Value>("{").expect_err("not JSON");
    for e in [
        E::Serialization(not_json),
        E::MsgPack("data too large to pack".into()),
        E::InvalidConfig("invalid job id".into()),
        E::from_script_code(bullmq::error::error_code::PARENT_JOB_NOT_EXIST),
    ] {
        let shown = e.to_string();
        assert!(classify(e, "adding job").is_rejected(), "{shown}");
    }
}

#[test]
fn any_other_error_is_transient() {
    let errors = [
        E::ConnectionClosed,
        E::RateLimited { delay_ms: 1000 },
        E::JobNotFound("j".into()),
        E::JobLocked("j".into()),
        E::WorkerClosed,
        E::Redis((redis::ErrorKind::UnexpectedReturnType, "response was nil").into()),
        E::Redis((redis::ErrorKind::Parse, "invalid response").into()),
    ];
    for e in errors {
        let shown = e.to_string();
        assert!(classify(e, "adding job").is_transient(), "{shown}");
    }
}

/// `format = "cloudevents"`: the job data is the JSON-format event whatever
/// the payload; a header no CloudEvents attribute may be named as has
/// nowhere to go on a job, and is refused by name.
#[test]
fn cloudevents_job_data_is_the_event_and_odd_headers_are_refused() {
    let relay = postbox_relay::Config {
        database_url: postbox_relay::Secret::new("postgres://h/shop"),
        ..Default::default()
    };
    let config = BullmqConfig {
        format: postbox_relay::cloudevents::Format::Cloudevents,
        ..Default::default()
    };
    let sink = postbox_relay::SinkConfig::sink(config, &relay).unwrap();
    let mut e = OutboxEvent {
        id: 1,
        event_id: postbox::sqlx::types::Uuid::new_v4(),
        topic: "orders".into(),
        event: "created".into(),
        key: Some("k".into()),
        payload: serde_json::json!([1, 2]),
        headers: serde_json::json!({"tenant": "acme"}),
        attempts: 0,
        created_at: chrono::Utc::now(),
        schema: "s".into(),
    };
    let data = match sink.job_data(&e).unwrap() {
        JobData::Extended(v) => v,
        JobData::Payload => panic!("the event, not the payload"),
    };
    assert_eq!(data["specversion"], "1.0");
    assert_eq!(data["source"], "//postbox/shop/s");
    assert_eq!(data["data"], serde_json::json!([1, 2]));
    assert_eq!(data["tenant"], "acme");
    e.headers = serde_json::json!({"X-Tenant": "acme"});
    let err = sink.job_data(&e).err().expect("refused");
    assert!(
        err.is_rejected() && err.to_string().contains("\"X-Tenant\""),
        "{err}"
    );
}
