-- The console's audit page: the newest actions first; $1 only ids below (the
-- next page; NULL = from the newest), $2 the most rows.
SELECT id, at, actor, action, selection, count
  FROM {schema}.console_audit
 WHERE ($1::bigint IS NULL OR id < $1)
 ORDER BY id DESC
 LIMIT $2
