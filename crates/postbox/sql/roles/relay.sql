-- The relay: claims, marks and retries outbox rows, dead-letters poison rows,
-- and runs retention on the outbox, the inbox and the dead letters; moves
-- scheduled events into the outbox when they are due. No DDL.
GRANT USAGE ON SCHEMA {schema} TO {role};
GRANT SELECT, INSERT, UPDATE, DELETE ON {schema}.outbox TO {role};
GRANT SELECT, DELETE ON {schema}.outbox_scheduled TO {role};
-- The outbox's partition column, computed as the mover inserts.
GRANT EXECUTE ON FUNCTION {schema}.postbox_outbox_partition(text, uuid) TO {role};
GRANT SELECT, INSERT, DELETE ON {schema}.outbox_dead_letter TO {role};
GRANT SELECT, DELETE ON {schema}.inbox TO {role};
GRANT SELECT, DELETE ON {schema}.inbox_dead_letter TO {role};
GRANT SELECT ON {schema}.postbox_migrations TO {role};
GRANT SELECT, UPDATE ON {schema}.outbox_wakeup TO {role};
GRANT SELECT, INSERT, UPDATE, DELETE ON {schema}.outbox_delivered TO {role};
-- With `postbox migrate --notify logical` the relay also opens one replication
-- session (a temporary logical slot): its role needs the REPLICATION attribute,
-- which only a superuser can give, so it is not granted here:
--   ALTER ROLE {role} REPLICATION;
-- (and pg_hba.conf must let the role connect to this database, as it does for
-- the relay's other sessions). Without it the relay polls and says so.
-- Its health record, and the other relays' (who takes partitions).
GRANT SELECT, INSERT, UPDATE, DELETE ON {schema}.outbox_relays TO {role};
