-- Wake the schema's sleeping relays, as the outbox trigger does for an
-- insert, for a statement that makes rows claimable without inserting them
-- (postbox replay). Sent at commit; $1 is the schema. A relay that missed it
-- finds the rows at its next poll_interval.
SELECT pg_catalog.pg_notify('postbox_outbox', $1)
