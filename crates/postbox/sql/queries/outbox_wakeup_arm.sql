-- A relay worker is about to sleep: take the armed lock of each of these
-- partitions (migration 0009), so that producers committing rows of them
-- NOTIFY. Without waiting: a partition whose lock a producer's commit holds
-- (shared) is left out and returned absent; the worker polls again shortly
-- and finds that row. Once a lock is taken, every row whose commit held it
-- is visible to the worker's last look before sleeping. Session-level, so
-- taken once per partition (see outbox_wakeup_disarm.sql).
SELECT p::smallint
  FROM unnest($2::int[]) AS p
 WHERE pg_try_advisory_lock(hashtext('postbox.armed.' || $1), p)
