INSERT INTO {schema}.reservations (order_id, sku, qty, state)
VALUES ($1, $2, $3, $4)
