-- One branch of outbox_claim_batch.sql: partition {partition}'s next
-- claimable rows, for the worker that owns it. `id + 0` is the order of
-- outbox_unsent_by_partition, which only that index provides (migration 0007).
-- The claim of a worker that keeps up is one branch for all its partitions,
-- {partition} = `ANY($2::smallint[])` (Queries::outbox_claim_sorted): an
-- index scan of them all and a sort; ordered by `id` instead, the planner
-- would walk the primary key through every other partition's rows.
(SELECT a.id + 0 AS id
   FROM {schema}.outbox a
  WHERE a.sent_at IS NULL
    AND a.partition_id = {partition}
    AND (a.next_attempt_at IS NULL OR a.next_attempt_at <= now())
    AND NOT EXISTS (
         SELECT 1 FROM {schema}.outbox w
          WHERE w.sent_at IS NULL
            AND w.next_attempt_at IS NOT NULL
            AND w.next_attempt_at > now()
            AND w.key = a.key
            AND w.id < a.id)
  ORDER BY a.id + 0
  LIMIT $1)
