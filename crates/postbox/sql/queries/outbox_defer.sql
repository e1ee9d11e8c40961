-- A transient failure of this row's key alone (the broker took other keys'
-- events): hold the row, and so its key, back for a while without counting
-- an attempt; other keys are not held.
UPDATE {schema}.outbox
   SET last_error = $2,
       next_attempt_at = now() + make_interval(secs => $3::float8 / 1000.0)
 WHERE id = $1
