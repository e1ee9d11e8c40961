-- `postbox dlq replay --yes`: move the matching dead letters back into the
-- outbox in one statement (filters as in dead_letter_list.sql). They keep their
-- event_id (the broker's and the inbox's idempotency key), topic, event, key,
-- payload, headers and created_at, start over (attempts 0, no error, no
-- backoff), and get new outbox ids, assigned in dead-letter id order: replayed
-- events of one key keep their relative order, and come after every row of
-- their key already in the outbox. The INSERT fires the NOTIFY trigger, so a
-- running relay picks them up at once.
WITH moved AS (
    DELETE FROM {schema}.outbox_dead_letter d
     WHERE ($1::text IS NULL OR d.topic = $1)
       AND ($2::text IS NULL OR d.key = $2)
       AND ($3::float8 IS NULL OR d.dead_at < now() - make_interval(secs => $3))
       AND ($4::float8 IS NULL OR d.dead_at > now() - make_interval(secs => $4))
       AND ($5::text IS NULL OR strpos(lower(d.last_error), lower($5)) > 0)
       AND ($6::bigint[] IS NULL OR d.id = ANY($6))
       AND ($7::text IS NULL OR d.fingerprint = $7)
    RETURNING d.id, d.event_id, d.topic, d.event, d.key, d.payload, d.headers, d.created_at
), inserted AS (
    INSERT INTO {schema}.outbox
           (event_id, topic, event, key, payload, headers, created_at,
            attempts, last_error, next_attempt_at)
    SELECT event_id, topic, event, key, payload, headers, created_at, 0, NULL, NULL
      FROM moved
     ORDER BY id
    RETURNING id, event_id
)
SELECT m.id AS dead_letter_id, i.id AS outbox_id, m.event_id, m.topic, m.key
  FROM inserted i
  JOIN moved m ON m.event_id = i.event_id
 ORDER BY i.id
