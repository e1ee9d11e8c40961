-- Takes the units only if they are there; no row back means a shortage.
UPDATE {schema}.products
   SET stock = stock - $2, reserved = reserved + $2
 WHERE sku = $1 AND stock >= $2
RETURNING sku
