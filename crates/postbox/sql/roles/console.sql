-- The operator console (`postbox console`): reads the outbox's unsent rows and
-- both sides' dead letters; replays (dead letters back into the outbox, or
-- marked for the consumer) and purges them; records each action in the audit
-- table. It never deletes or changes outbox rows. No DDL. Relay sessions and
-- their client addresses show in full only with pg_read_all_stats:
--   GRANT pg_read_all_stats TO {role};
GRANT USAGE ON SCHEMA {schema} TO {role};
GRANT SELECT, INSERT ON {schema}.outbox TO {role};
GRANT SELECT, DELETE ON {schema}.outbox_dead_letter TO {role};
GRANT SELECT, UPDATE, DELETE ON {schema}.inbox_dead_letter TO {role};
GRANT SELECT ON {schema}.postbox_migrations TO {role};
GRANT SELECT, INSERT ON {schema}.console_audit TO {role};
GRANT SELECT ON {schema}.outbox_delivered TO {role};
GRANT SELECT ON {schema}.outbox_scheduled TO {role};
GRANT EXECUTE ON FUNCTION {schema}.postbox_outbox_partition(text, uuid) TO {role};
GRANT SELECT ON {schema}.outbox_relays TO {role};
