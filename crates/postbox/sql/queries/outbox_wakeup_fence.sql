-- After arming (committed), before the final claim: wait until every producer
-- transaction that may have read the flag unset has committed (they hold the
-- shared side of this lock until then; see migration 0005). Released at once.
SELECT pg_advisory_xact_lock(hashtext('postbox.wakeup.' || $1), 0)
