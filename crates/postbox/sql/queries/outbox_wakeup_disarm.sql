-- A relay worker is awake and working these partitions, or gives them back:
-- release their armed locks, so producers skip the NOTIFY (adaptive wake-up).
SELECT count(pg_advisory_unlock(hashtext('postbox.armed.' || $1), p))
  FROM unnest($2::int[]) AS p
