UPDATE {schema}.products SET reserved = reserved - $2, stock = stock + $2 WHERE sku = $1
