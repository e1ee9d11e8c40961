-- Move a row that used up its attempts out of the outbox, so its key moves on.
-- A row replayed to another topic (--to-topic) keeps the topic it failed on.
WITH moved AS (
    DELETE FROM {schema}.outbox WHERE id = $1
    RETURNING id, event_id, coalesce(replay_topic, topic) AS topic, event, key, payload, headers, created_at, attempts
)
INSERT INTO {schema}.outbox_dead_letter
       (id, event_id, topic, event, key, payload, headers, created_at, attempts, last_error)
SELECT id, event_id, topic, event, key, payload, headers, created_at, attempts + 1, $2
  FROM moved
