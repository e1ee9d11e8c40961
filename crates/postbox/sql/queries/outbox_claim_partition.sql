-- One branch of outbox_claim_batch.sql, for partition {partition}: its
-- claimable rows past the worker's position ({after}, an (xid, id) row), read
-- in order from outbox_unsent_by_position. A worker with holes adds the branch
-- of outbox_claim_partition_holes.sql beside it.
-- `id + 0` is the order of outbox_unsent_by_position, which only that index
-- provides (migration 0010), and `partition_id IS NOT NULL` its predicate
-- (always true). The NOT EXISTS looks for the key's waiting rows in
-- outbox_waiting, by key: rows with a next_attempt_at, due or not. A due
-- row lies below the worker's position until the worker moves the position
-- back to it (it learns so from outbox_held_list.sql); until it is sent
-- again, it holds its key's later rows, or a claim from the position would
-- send them first.
-- For the claim of a worker that keeps up (Queries::outbox_claim_sorted),
-- {partition} is `ANY($2::smallint[])` and {after} the lowest position of
-- them: one index scan of all, and a sort.
(SELECT a.id + 0 AS id, a.xid
   FROM {schema}.outbox a
  WHERE a.sent_at IS NULL
    AND a.partition_id IS NOT NULL
    AND a.partition_id = {partition}
    AND (a.xid, a.id + 0) > {after}
    AND (a.next_attempt_at IS NULL OR a.next_attempt_at <= now())
    AND NOT EXISTS (
         SELECT 1 FROM {schema}.outbox w
          WHERE w.sent_at IS NULL
            AND w.next_attempt_at IS NOT NULL
            AND w.key = a.key
            AND (w.xid, w.id) < (a.xid, a.id))
  ORDER BY a.xid, a.id + 0
  LIMIT $1)
