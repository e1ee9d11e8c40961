INSERT INTO {schema}.products (sku, stock)
VALUES ($1, $2)
ON CONFLICT (sku) DO UPDATE SET stock = EXCLUDED.stock, reserved = 0, sold = 0
