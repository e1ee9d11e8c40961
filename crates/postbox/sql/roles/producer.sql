-- A producer: writes events into the outbox (inside its own transactions).
-- It needs nothing else from postbox: no SELECT, no UPDATE, no DDL.
GRANT USAGE ON SCHEMA {schema} TO {role};
GRANT INSERT ON {schema}.outbox TO {role};
-- The outbox's generated partition column calls this function as the inserting
-- role (PUBLIC may run it unless that default was revoked).
GRANT EXECUTE ON FUNCTION {schema}.postbox_outbox_partition(text, uuid) TO {role};
