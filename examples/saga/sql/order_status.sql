SELECT status, cancel_reason FROM {schema}.orders WHERE id = $1
