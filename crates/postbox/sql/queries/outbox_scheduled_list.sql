-- Scheduled events not yet due, soonest first (postbox scheduled list): $1
-- a topic (NULL: all), $2 at most this many; `matching` counts them all.
SELECT event_id, topic::text AS topic, event::text AS event, key, deliver_at, created_at,
       count(*) OVER () AS matching
  FROM {schema}.outbox_scheduled
 WHERE ($1::text IS NULL OR topic = $1)
 ORDER BY deliver_at, id
 LIMIT $2
