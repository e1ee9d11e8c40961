-- Cancel a scheduled event ($1, its event id) that is not yet due. One the
-- relay already moved into the outbox is past cancelling: no row comes back.
-- A move in flight holds the row; this waits for it and then finds nothing.
DELETE FROM {schema}.outbox_scheduled
 WHERE event_id = $1
RETURNING id
