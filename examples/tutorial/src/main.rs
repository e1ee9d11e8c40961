//! Place an order: `cargo run -- <id> <customer>`.
use postbox::{sqlx::PgPool, Event, Outbox};
use serde_json::json;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let id: i32 = args
        .next()
        .ok_or("usage: place-order <id> <customer>")?
        .parse()?;
    let customer = args.next().ok_or("usage: place-order <id> <customer>")?;
    let pool = PgPool::connect(&std::env::var("DATABASE_URL")?).await?;

    // The order and its event commit together, or neither does.
    let mut tx = pool.begin().await?;
    postbox::sqlx::query("INSERT INTO shop.orders (id, customer) VALUES ($1, $2)")
        .bind(id)
        .bind(&customer)
        .execute(&mut *tx)
        .await?;
    let event = Event::new(
        "orders",
        "order.placed",
        json!({"id": id, "customer": customer}),
    )
    .key(format!("customer:{customer}"));
    Outbox::new("shop")?.enqueue(&mut tx, event).await?;
    tx.commit().await?;
    println!("order {id} placed");
    Ok(())
}
