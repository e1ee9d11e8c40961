-- Retention: delete dead letters older than $1 seconds, at most $2 per call.
DELETE FROM {schema}.outbox_dead_letter
 WHERE id IN (
       SELECT id FROM {schema}.outbox_dead_letter
        WHERE dead_at < now() - make_interval(secs => $1::float8)
        ORDER BY dead_at
        LIMIT $2)
