//! The timeouts a hosted database sets, while the broker is slow.

use crate::support::*;
use sqlx::Connection;

/// The timeouts hosted databases set for their applications, on a cluster
/// of the test's own, while the broker answers slowly: the relay's claim
/// transaction stays open while a batch is published (4 s here, against an
/// `idle_in_transaction_session_timeout` of 300 ms), and its statements give
/// the server's `statement_timeout` and `lock_timeout` way to its own
/// `session_timeout`. Every event arrives once, in order, and no session is
/// lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relay_works_under_a_hosted_databases_timeouts_while_the_broker_is_slow() {
    let pg = postbox_testkit::PgCluster::start_with(
        "statement_timeout = '2s'\nidle_in_transaction_session_timeout = '300ms'\nlock_timeout = '100ms'\n",
    )
    .await
    .unwrap_or_else(|e| panic!("{e}"));
    let url = pg.url();
    let schema = postbox_testkit::unique_schema("timeouts");
    let name = postbox::SchemaName::new(&schema).unwrap();
    let mut conn = sqlx::PgConnection::connect(&url).await.unwrap();
    postbox::migrate::run(&mut conn, &name, Default::default())
        .await
        .unwrap();
    const N: usize = 40;
    let outbox = postbox::Outbox::new(&schema).unwrap();
    let mut tx = conn.begin().await.unwrap();
    for seq in 1..=N {
        outbox
            .enqueue(&mut tx, event("hooks", "k", seq))
            .await
            .unwrap();
    }
    tx.commit().await.unwrap();
    let rx = postbox_testkit::WebhookReceiver::start(crate::webhook::SECRET, None).await;
    let hook = format!("http://127.0.0.1:{}/slow/{{topic}}/{{key}}", rx.port);
    let relay = RelayProcess::spawn(
        BIN,
        &[
            "--database-url",
            &url,
            "--schemas",
            &schema,
            "--sink",
            "webhook",
            "--webhook-url",
            &hook,
            "--webhook-secrets",
            crate::webhook::SECRET,
            "--publish-timeout",
            "20s",
        ],
        &[],
    );
    drop(conn);
    let pool = sqlx::PgPool::connect(&url).await.unwrap();
    let unsent = format!("SELECT count(*) FROM {schema}.outbox WHERE sent_at IS NULL");
    wait_until(LONG, "every event delivered", || async {
        sqlx::query_scalar::<_, i64>(&unsent)
            .fetch_one(&pool)
            .await
            .unwrap()
            == 0
    })
    .await;
    let seqs: Vec<i64> = rx
        .seen("slow")
        .iter()
        .map(|r| {
            let body: serde_json::Value =
                serde_json::from_str(r["body"].as_str().unwrap()).unwrap();
            body["seq"].as_i64().unwrap()
        })
        .collect();
    assert_eq!(
        seqs,
        (1..=N as i64).collect::<Vec<_>>(),
        "once each, in order"
    );
    let log = relay.output();
    assert!(
        !log.contains("lost its database session")
            && !log.contains("due to statement timeout")
            && !log.contains("idle-in-transaction"),
        "{log}"
    );
}
