-- Seconds until the next scheduled event is due (at most 0 when one is due
-- now; NULL when none is scheduled): how long the mover may sleep.
SELECT extract(epoch FROM min(deliver_at) - now())::float8
  FROM {schema}.outbox_scheduled
