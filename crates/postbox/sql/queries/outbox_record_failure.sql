-- A poison failure: count it and hold the row (and so its key) back until the
-- backoff has passed. Transient failures never come here.
UPDATE {schema}.outbox
   SET attempts = attempts + 1,
       last_error = $2,
       next_attempt_at = now() + make_interval(secs => $3::float8 / 1000.0)
 WHERE id = $1
