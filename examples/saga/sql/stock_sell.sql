UPDATE {schema}.products SET reserved = reserved - $2, sold = sold + $2 WHERE sku = $1
