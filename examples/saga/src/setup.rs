//! Creating (and dropping) a deployment's three schemas: postbox's outbox and
//! inbox, each service's own tables, and the inventory's initial stock.

use crate::model::{Names, Service};
use crate::Error;
use postbox::sql::render;
use sqlx::PgPool;

fn tables_sql(s: Service) -> &'static str {
    match s {
        Service::Orders => include_str!("../sql/orders_tables.sql"),
        Service::Inventory => include_str!("../sql/inventory_tables.sql"),
        Service::Payments => include_str!("../sql/payments_tables.sql"),
    }
}

/// Create the three schemas and seed `stock` (sku, units) into the inventory.
pub async fn install(pool: &PgPool, names: &Names, stock: &[(String, i64)]) -> Result<(), Error> {
    let mut conn = pool.acquire().await?;
    for s in Service::ALL {
        let schema = names.schema(s);
        sqlx::raw_sql(&format!("CREATE SCHEMA IF NOT EXISTS {schema}"))
            .execute(&mut *conn)
            .await?;
        postbox::migrate::run(&mut conn, schema, Default::default()).await?;
        sqlx::raw_sql(&render(tables_sql(s), schema))
            .execute(&mut *conn)
            .await?;
    }
    let seed = render(
        include_str!("../sql/product_seed.sql"),
        names.schema(Service::Inventory),
    );
    for (sku, units) in stock {
        sqlx::query(&seed)
            .bind(sku)
            .bind(i32::try_from(*units)?)
            .execute(&mut *conn)
            .await?;
    }
    Ok(())
}

/// Drop the three schemas and everything in them.
pub async fn drop_all(pool: &PgPool, names: &Names) -> Result<(), Error> {
    for s in Service::ALL {
        // A validated identifier (SchemaName), never raw input.
        sqlx::raw_sql(&format!(
            "DROP SCHEMA IF EXISTS {} CASCADE",
            names.schema(s)
        ))
        .execute(pool)
        .await?;
    }
    Ok(())
}
