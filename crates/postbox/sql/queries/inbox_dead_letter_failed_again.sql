-- A replay failed: the row is a dead letter again, with the new error. $1 id,
-- $2 last_error.
UPDATE {schema}.inbox_dead_letter
   SET attempts = attempts + 1, last_error = $2, dead_at = now(), replay_at = NULL
 WHERE id = $1
