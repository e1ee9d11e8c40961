SELECT state FROM {schema}.reservations WHERE order_id = $1
