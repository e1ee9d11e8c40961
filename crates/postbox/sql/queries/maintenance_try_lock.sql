-- One maintenance runner per schema at a time, across all relay instances
-- (transaction-scoped: released at the end of each pass).
SELECT pg_try_advisory_xact_lock(hashtext('postbox.maintenance.' || $1))
