-- The claim reads each owned partition's unsent rows from its first one
-- (queries/outbox_claim_batch.sql). With only an index on id, a relay worker
-- whose partitions were empty walked every other partition's unsent rows to
-- learn that: with a million-row backlog on one key, each idle worker's poll
-- read the whole backlog. This index replaces outbox_unsent: the same rows,
-- so a producer's insert adds no index entry it did not add before.
--
-- Ordered by `id + 0`, not `id`, so that no other index can stand in for it:
-- the primary key also yields rows in id order, and with statistics taken
-- before most rows were sent (normal for a queue) the planner chose it for a
-- partition holding the backlog and walked every sent row at its head.
--
-- Building it scans the table once and holds off inserts meanwhile.
CREATE INDEX outbox_unsent_by_partition ON {schema}.outbox (partition_id, (id + 0))
    WHERE sent_at IS NULL;

DROP INDEX {schema}.outbox_unsent;
