-- A producer: writes events into the outbox (inside its own transactions).
-- It needs nothing else from postbox: no SELECT, no UPDATE, no DDL.
GRANT USAGE ON SCHEMA {schema} TO {role};
GRANT INSERT ON {schema}.outbox TO {role};
