SELECT sku, stock::bigint, reserved::bigint, sold::bigint FROM {schema}.products
