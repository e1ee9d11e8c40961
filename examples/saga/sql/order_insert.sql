INSERT INTO {schema}.orders (sku, qty, amount_cents, card)
VALUES ($1, $2, $3, $4)
RETURNING id
