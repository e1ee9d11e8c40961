-- `postbox status`: the relay sessions of schema $1, i.e. the holders of its
-- member locks (relay_member_join.sql) and partition locks
-- (partition_try_acquire.sql), with the partitions each owns and what
-- pg_stat_activity tells about it (state_change: when its last statement
-- began or ended; a working relay's sessions query every poll_interval). application_name is
-- `postbox-relay:<pid>:<id>@<version>:worker`; client_addr and backend_start are NULL for
-- other roles' sessions unless the caller has pg_read_all_stats.
SELECT l.pid,
       a.application_name,
       host(a.client_addr) AS client_addr,
       a.backend_start,
       a.state_change,
       coalesce(array_agg(l.objid::int4 ORDER BY l.objid)
                FILTER (WHERE l.classid::int4 = hashtext('postbox.partition.' || $1)),
                '{}') AS partitions
  FROM pg_locks l
  LEFT JOIN pg_stat_activity a ON a.pid = l.pid
 WHERE l.locktype = 'advisory'
   AND l.granted
   AND l.objsubid = 2
   AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
   AND l.classid::int4 IN (hashtext('postbox.partition.' || $1), hashtext('postbox.member.' || $1))
 GROUP BY l.pid, a.application_name, a.client_addr, a.backend_start, a.state_change
 ORDER BY l.pid
