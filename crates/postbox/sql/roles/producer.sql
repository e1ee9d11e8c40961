-- A producer: writes events into the outbox (inside its own transactions).
-- The library's insert (Rust and Node) returns the new row's id and event_id,
-- and RETURNING needs SELECT on what it returns: on those two columns only, so
-- a producer still reads no payload, key or header.
GRANT USAGE ON SCHEMA {schema} TO {role};
GRANT INSERT ON {schema}.outbox TO {role};
GRANT SELECT (id, event_id) ON {schema}.outbox TO {role};
-- Scheduled events (deliver_at): the same, and cancelling one (a DELETE by
-- event_id, returning its id).
GRANT INSERT, DELETE ON {schema}.outbox_scheduled TO {role};
GRANT SELECT (id, event_id) ON {schema}.outbox_scheduled TO {role};
-- The outbox's generated partition column calls this function as the inserting
-- role (PUBLIC may run it unless that default was revoked).
GRANT EXECUTE ON FUNCTION {schema}.postbox_outbox_partition(text, uuid) TO {role};
