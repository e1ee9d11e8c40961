-- `block` policy: a row out of attempts stays in the outbox and holds its key
-- back until an operator acts (fix the row, then reset next_attempt_at to NULL).
UPDATE {schema}.outbox
   SET attempts = attempts + 1,
       last_error = $2,
       next_attempt_at = 'infinity'
 WHERE id = $1
