-- A relay worker is about to sleep: take the armed lock of each of these
-- partitions (migration 0009), so that producers committing rows of them
-- NOTIFY. Waits for producers whose commit holds the shared side: once
-- granted, their rows are visible to the worker's last look before sleeping.
-- Session-level, so taken once per partition (see outbox_wakeup_disarm.sql).
SELECT count(pg_advisory_lock(hashtext('postbox.armed.' || $1), p))
  FROM unnest($2::int[]) AS p
