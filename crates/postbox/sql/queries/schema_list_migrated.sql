-- The schemas of this database that hold postbox tables (a
-- postbox_migrations table), by name: what `postbox status` reports on when
-- it is given no schema. Any schema name postgres allows may come back; the
-- caller validates each.
SELECT n.nspname::text
  FROM pg_class c
  JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE c.relname = 'postbox_migrations'
   AND c.relkind IN ('r', 'p')
 ORDER BY 1
