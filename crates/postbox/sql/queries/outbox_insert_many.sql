-- One statement for many events (one NOTIFY, one round trip). WITH ORDINALITY
-- keeps the caller's order, so ids follow it.
INSERT INTO {schema}.outbox (event_id, topic, event, key, payload, headers)
SELECT coalesce(e.event_id, gen_random_uuid()), e.topic, e.event, e.key, e.payload, e.headers
  FROM unnest($1::uuid[], $2::text[], $3::text[], $4::text[], $5::jsonb[], $6::jsonb[])
       WITH ORDINALITY AS e(event_id, topic, event, key, payload, headers, n)
 ORDER BY e.n
RETURNING id, event_id
