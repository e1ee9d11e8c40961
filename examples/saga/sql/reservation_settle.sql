-- Only a held reservation can be sold or released: settling one that is not
-- held (already released, sold, or never reserved) returns nothing and is a no-op.
UPDATE {schema}.reservations
   SET state = $2, updated_at = now()
 WHERE order_id = $1 AND state = 'held'
RETURNING sku, qty
