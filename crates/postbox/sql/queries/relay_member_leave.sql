-- A worker stopping cleanly gives back its member lock and every partition
-- before it tells the others (relay_rebalance_signal.sql), so they find the
-- partitions free when they look. A session that dies frees them the same way
-- when the server ends it.
SELECT pg_advisory_unlock_all()
