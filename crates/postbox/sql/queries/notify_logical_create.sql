-- `--notify logical`: no trigger at all; the relay follows the outbox's
-- inserts through logical decoding (pgoutput) of this publication, so a
-- producer's commit takes no NOTIFY lock. INSERT only: the relay's own
-- UPDATE/DELETE are not published and never wake it. The `id` column only
-- (a column list, PostgreSQL 15+): the relay needs to know *that* a row came,
-- so payloads never cross the replication session. Dropped and created again
-- so a publication left behind by a dropped schema of the same name is
-- replaced. Needs wal_level = logical (checked before this runs).
DROP TRIGGER IF EXISTS outbox_notify ON {schema}.outbox;
DROP TRIGGER IF EXISTS outbox_notify_adaptive ON {schema}.outbox;
DROP PUBLICATION IF EXISTS {publication};
CREATE PUBLICATION {publication} FOR TABLE {schema}.outbox (id) WITH (publish = 'insert');
