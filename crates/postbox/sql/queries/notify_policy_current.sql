-- The wake-up policy in force on the schema's outbox, from what is installed:
-- the adaptive constraint trigger, the per-statement trigger, the publication
-- for logical decoding, or none of them. NULL when there is no outbox yet.
-- pg_trigger and pg_publication_tables are readable by every role.
WITH outbox AS (SELECT to_regclass($1 || '.outbox') AS oid)
SELECT CASE
         WHEN outbox.oid IS NULL THEN NULL
         WHEN EXISTS (SELECT 1 FROM pg_catalog.pg_trigger t
                       WHERE t.tgrelid = outbox.oid AND t.tgname = 'outbox_notify_adaptive')
           THEN 'adaptive'
         WHEN EXISTS (SELECT 1 FROM pg_catalog.pg_trigger t
                       WHERE t.tgrelid = outbox.oid AND t.tgname = 'outbox_notify')
           THEN 'statement'
         WHEN EXISTS (SELECT 1 FROM pg_catalog.pg_publication_tables p
                       WHERE p.pubname = '{publication}' AND p.schemaname = $1
                         AND p.tablename = 'outbox')
           THEN 'logical'
         ELSE 'off'
       END
  FROM outbox
