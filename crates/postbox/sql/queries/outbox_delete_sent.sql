-- `sent = "delete"`: a delivered row leaves the outbox at once, in the same
-- transaction as the claim. One dead tuple and no index insertions per event,
-- where marking (`outbox_mark_sent.sql`) writes a new row version and its index
-- entries, and retention deletes it again later.
DELETE FROM {schema}.outbox WHERE id = ANY($1::bigint[])
