-- Enqueue an event to deliver at or after $7 (Event::deliver_at): into
-- outbox_scheduled, from which the relay moves it into the outbox when due.
INSERT INTO {schema}.outbox_scheduled (event_id, topic, event, key, payload, headers, deliver_at)
VALUES (coalesce($1, gen_random_uuid()), $2, $3, $4, $5, $6, $7)
RETURNING id, event_id
