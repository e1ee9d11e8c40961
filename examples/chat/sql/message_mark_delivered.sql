UPDATE {schema}.messages SET delivered_at = coalesce(delivered_at, clock_timestamp()) WHERE id = $1
RETURNING chat_id
