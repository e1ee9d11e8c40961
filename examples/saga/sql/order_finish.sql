-- Only a PENDING order moves: a second confirmation or cancellation is a no-op.
UPDATE {schema}.orders
   SET status = $2, cancel_reason = $3, updated_at = now()
 WHERE id = $1 AND status = 'PENDING'
RETURNING id
