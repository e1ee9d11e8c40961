-- Retention: delete consumer dead letters older than $1 seconds (not those
-- waiting for a replay), at most $2 per call.
DELETE FROM {schema}.inbox_dead_letter
 WHERE id IN (
       SELECT id FROM {schema}.inbox_dead_letter
        WHERE dead_at < now() - make_interval(secs => $1::float8)
          AND replay_at IS NULL
        ORDER BY dead_at
        LIMIT $2)
