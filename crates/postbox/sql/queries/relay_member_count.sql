SELECT count(*), pg_backend_pid()
  FROM pg_locks
 WHERE locktype = 'advisory'
   AND granted
   AND objsubid = 2
   AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
   AND classid::int4 = hashtext('postbox.member.' || $1)
