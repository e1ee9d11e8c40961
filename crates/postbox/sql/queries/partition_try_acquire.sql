-- Take up to $3 of the candidate partitions $2 of schema $1 that no other
-- session owns. Ownership is a session-level advisory lock: it ends when the
-- owning session ends (crash, SIGKILL, network loss, pg_terminate_backend),
-- which is how a dead relay's partitions pass to the living. The scan stops at
-- LIMIT, so no more than $3 locks are taken.
SELECT p::smallint
  FROM unnest($2::int[]) AS p
 WHERE pg_try_advisory_lock(hashtext('postbox.partition.' || $1), p)
 LIMIT $3
