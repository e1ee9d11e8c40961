//! Orders in, shipments out, exactly once. Run `postbox migrate --schema shop`
//! and `postbox relay --schemas shop --redis-url …` beside it.
use postbox::sqlx::{self, PgConnection, PgPool};
use postbox::{Event, Outbox};
use postbox_bullmq::{inbox_worker, worker_options, BoxError, CancellationToken};
use postbox_bullmq::{Handler, Inbox, InboxConsumer, Message, RetryPolicy};
use serde_json::json;
use std::time::Duration;

struct Shipping {
    insert: String,
}

impl Handler for Shipping {
    async fn handle(&self, tx: &mut PgConnection, msg: &Message) -> Result<(), BoxError> {
        let order: serde_json::Value = msg.json()?;
        let qty = order["qty"].as_i64().ok_or("order without a qty")?;
        sqlx::query(&self.insert)
            .bind(order["id"].as_i64())
            .bind(qty)
            .execute(tx)
            .await?;
        Ok(())
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let var = |k: &str| std::env::var(k).map_err(|_| format!("set {k}"));
    let (schema, queue) = (var("SHOP_SCHEMA")?, var("SHOP_QUEUE")?);
    let schema = postbox::SchemaName::new(&schema)?; // validated: safe in SQL below
    let pool = PgPool::connect(&var("DATABASE_URL")?).await?;
    let table = format!("{schema}.shipments");
    sqlx::raw_sql(&format!(
        "CREATE TABLE IF NOT EXISTS {table} (order_id bigint PRIMARY KEY, qty int)"
    ))
    .execute(&pool)
    .await?;

    // Produce: business rows (none here) and events commit together, or not at all.
    let outbox = Outbox::new(schema.as_str())?;
    let mut tx = pool.begin().await?;
    for (id, order) in [
        (1, json!({"id": 1, "qty": 2})),
        (2, json!({"id": 2})),
        (3, json!({"id": 3, "qty": 1})),
    ] {
        let event = Event::new(&queue, "order.placed", order).key(format!("order:{id}"));
        outbox.enqueue(&mut tx, event).await?;
    }
    tx.commit().await?;

    // Consume: each message's effect and its inbox record commit together; order 2
    // fails 3 times, then waits as a dead letter for `postbox inbox-dlq replay`.
    let retry = RetryPolicy {
        attempts: 3,
        backoff_min: Duration::from_millis(100),
        ..Default::default()
    };
    let consumer =
        InboxConsumer::new(pool.clone(), Inbox::new(schema.as_str())?, "shipping").retry(retry);
    let shutdown = CancellationToken::new();
    let handler = Shipping {
        insert: format!("INSERT INTO {table} VALUES ($1, $2)"),
    };
    let worker = inbox_worker(
        consumer,
        &queue,
        handler,
        worker_options(&var("REDIS_URL")?),
        shutdown.clone(),
    );
    let running = tokio::spawn(worker.await?.run());

    let count = |sql: String| {
        let pool = pool.clone();
        async move { sqlx::query_scalar::<_, i64>(&sql).fetch_one(&pool).await }
    };
    while count(format!("SELECT count(*) FROM {table}")).await? < 2
        || count(format!("SELECT count(*) FROM {schema}.inbox_dead_letter")).await? < 1
    {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    println!("shipped orders 1 and 3; order 2 is a dead letter: postbox inbox-dlq list --schema {schema}");
    shutdown.cancel();
    running.await??;
    Ok(())
}
