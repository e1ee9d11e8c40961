-- The console's record of one operator action (migration 0011): $1 actor,
-- $2 action, $3 selection (jsonb), $4 rows touched.
INSERT INTO {schema}.console_audit (actor, action, selection, count)
VALUES ($1, $2, $3, $4)
RETURNING id, at
