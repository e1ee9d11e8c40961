-- v1: the message alone; its event is sent to Redis afterwards (dual write).
INSERT INTO {schema}.messages (chat_id, body) VALUES ($1, $2)
RETURNING id, chat_id, body, created_at, delivered_at
