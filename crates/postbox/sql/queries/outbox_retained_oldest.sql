-- The oldest sent row still retained (relays with `sent = "mark"` keep sent
-- rows for `outbox_retention`): how far back `postbox replay` can reach.
-- Retention deletes sent rows from the lowest ids, so the primary key finds
-- it first.
SELECT created_at
  FROM {schema}.outbox
 WHERE sent_at IS NOT NULL
 ORDER BY id
 LIMIT 1
