SELECT order_id, amount_cents, status FROM {schema}.charges
