-- One mover of scheduled events per schema at a time, across all relays
-- (transaction-scoped), so that events due together enter the outbox in one
-- order: by deliver_at, then as they were scheduled.
SELECT pg_try_advisory_xact_lock(hashtext('postbox.scheduled.' || $1))
