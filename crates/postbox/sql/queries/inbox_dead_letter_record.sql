-- A consumer gave up on a message after its retry policy: keep it whole. The
-- same message dead again (redelivered by the broker, or a replay that failed)
-- adds its attempts to the row, takes the newest error and keeps its first
-- failure time. $11 is how long ago the first of these attempts failed, in
-- seconds, measured by the consumer (so its clock and the server's need not agree).
-- $1 consumer, $2 message_id, $3 topic, $4 name, $5 key, $6 payload, $7 headers,
-- $8 source, $9 attempts, $10 last_error, $11 failing_for_seconds.
INSERT INTO {schema}.inbox_dead_letter AS d
       (consumer, message_id, topic, name, key, payload, headers, source, attempts, last_error,
        first_failed_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10,
        now() - make_interval(secs => greatest($11::float8, 0)))
ON CONFLICT (consumer, message_id) DO UPDATE
   SET attempts = d.attempts + excluded.attempts,
       last_error = excluded.last_error,
       dead_at = now(),
       replay_at = NULL
