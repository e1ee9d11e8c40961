SELECT id, sku, qty, amount_cents, status, cancel_reason FROM {schema}.orders
