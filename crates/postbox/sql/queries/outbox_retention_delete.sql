-- Retention: delete sent rows older than $1 seconds, at most $2 per call
-- (small batches keep locks short). Sent rows are the oldest ids, so the
-- primary-key scan finds them first.
DELETE FROM {schema}.outbox
 WHERE id IN (
       SELECT id FROM {schema}.outbox
        WHERE sent_at IS NOT NULL
          AND sent_at < now() - make_interval(secs => $1::float8)
        ORDER BY id
        LIMIT $2)
