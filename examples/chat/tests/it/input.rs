//! Bad input: 4xx with a clear message, nothing stored, nothing published.

use crate::support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_messages_are_refused_and_nothing_is_stored() {
    refused_and_nothing_stored(Pair::start().await).await;
}

/// The Node.js service refuses the same requests with the same statuses and words.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_node_service_refuses_bad_messages_alike() {
    refused_and_nothing_stored(Pair::start_with_node(Some("consumers")).await).await;
}

async fn refused_and_nothing_stored(pair: Pair) {
    let base = pair.consumers.base();
    let long = "x".repeat(2001);
    let cases: Vec<(String, String, u16, &str)> = vec![
        (
            format!("{base}/api/chats/1/messages"),
            r#"{"body": ""}"#.into(),
            422,
            "empty",
        ),
        (
            format!("{base}/api/chats/1/messages"),
            r#"{"body": "   \n\t "}"#.into(),
            422,
            "empty",
        ),
        (
            format!("{base}/api/chats/1/messages"),
            format!(r#"{{"body": "{long}"}}"#),
            413,
            "limit is 2000",
        ),
        (
            format!("{base}/api/chats/999/messages"),
            r#"{"body": "hi"}"#.into(),
            404,
            "chat 999 does not exist",
        ),
        (
            format!("{base}/api/chats/1/messages"),
            r#"{"body": "unterminated"#.into(),
            400,
            "expected a JSON object",
        ),
        (
            format!("{base}/api/chats/1/messages"),
            r#"{"text": "wrong field"}"#.into(),
            400,
            "body",
        ),
        (
            format!("{base}/api/chats/1/messages"),
            r#"["not", "an", "object"]"#.into(),
            400,
            "expected a JSON object",
        ),
    ];
    for (url, body, status, needle) in cases {
        let (got, json) = Http.post_raw(&url, &body).await.unwrap();
        assert_eq!(got, status, "{body:.40}: {json}");
        let msg = json["error"].as_str().unwrap_or_default();
        assert!(
            msg.contains(needle),
            "{body:.40}: error {msg:?} should mention {needle:?}"
        );
    }
    // The 2000-character boundary itself is accepted.
    let (ok, _) = Http
        .post_raw(
            &format!("{base}/api/chats/1/messages"),
            &format!(r#"{{"body": "{}"}}"#, "y".repeat(2000)),
        )
        .await
        .unwrap();
    assert_eq!(ok, 201);
    assert_eq!(
        pair.count(&pair.consumers, "messages").await,
        1,
        "only the valid message is stored"
    );
    assert_eq!(
        pair.count(&pair.consumers, "outbox").await,
        1,
        "only the valid message is published"
    );
    pair.finish().await;
}
