SELECT order_id, sku, qty::bigint, state FROM {schema}.reservations
