-- No row back: this order was already charged (or declined); do nothing again.
INSERT INTO {schema}.charges (order_id, amount_cents, status, reason)
VALUES ($1, $2, $3, $4)
ON CONFLICT (order_id) DO NOTHING
RETURNING id
