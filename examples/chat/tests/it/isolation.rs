//! Each service's role sees only its own schema.

use crate::support::*;
use sqlx::Connection;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_cannot_read_the_other_schema() {
    let pair = Pair::start().await;
    let mut conn = sqlx::PgConnection::connect(&pair.consumers.db_url)
        .await
        .unwrap();
    let own: i64 = sqlx::query_scalar(&format!(
        "SELECT count(*) FROM {}.messages",
        pair.consumers.schema
    ))
    .fetch_one(&mut conn)
    .await
    .unwrap();
    assert_eq!(own, 0);
    for table in ["messages", "outbox", "inbox", "received"] {
        let err = sqlx::query(&format!("SELECT * FROM {}.{table}", pair.workers.schema))
            .fetch_all(&mut conn)
            .await
            .unwrap_err()
            .to_string();
        assert!(err.contains("permission denied"), "{table}: {err}");
    }
    pair.finish().await;
}
