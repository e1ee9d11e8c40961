INSERT INTO {schema}.outbox (event_id, topic, event, key, payload, headers)
VALUES (coalesce($1, gen_random_uuid()), $2, $3, $4, $5, $6)
RETURNING id, event_id
