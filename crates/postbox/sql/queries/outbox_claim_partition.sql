-- One pair of branches of outbox_claim_batch.sql, for partition {partition}:
--  1. its claimable rows past the worker's position ({after}, an (xid, id)
--     row), read in order from outbox_unsent_by_position;
--  2. its claimable rows at or below the position whose transaction is in
--     {holes}: transactions that were open when the position passed them.
--     One index lookup of their own rows by (partition_id, xid) per hole,
--     however many dead entries lie below the position, then a sort; none
--     when there are no holes. Written as a lateral subquery that cannot be
--     flattened (OFFSET 0): as `xid = ANY(holes)`, the planner, which counts
--     only live rows in the index, preferred walking the whole partition
--     with the array as a filter.
-- `id + 0` is the order of outbox_unsent_by_position, which only that index
-- provides (migration 0010), and `partition_id IS NOT NULL` its predicate
-- (always true). The NOT EXISTS looks for the key's waiting rows in
-- outbox_waiting, by key.
-- For the claim of a worker that keeps up (Queries::outbox_claim_sorted),
-- {partition} is `ANY($2::smallint[])` and {after} the lowest position of
-- them: one index scan of all, and a sort.
(SELECT a.xid, a.id + 0 AS id
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
            AND w.next_attempt_at > now()
            AND w.key = a.key
            AND (w.xid, w.id) < (a.xid, a.id))
  ORDER BY a.xid, a.id + 0
  LIMIT $1)
UNION ALL
(SELECT l.xid, l.id
   FROM unnest({holes}) h(xid),
        LATERAL (
         SELECT a.xid, a.id
           FROM {schema}.outbox a
          WHERE a.sent_at IS NULL
            AND a.partition_id IS NOT NULL
            AND a.partition_id = {partition}
            AND a.xid = h.xid
            AND ((a.xid, a.id) <= {after}) IS TRUE
            AND (a.next_attempt_at IS NULL OR a.next_attempt_at <= now())
            AND NOT EXISTS (
                 SELECT 1 FROM {schema}.outbox w
                  WHERE w.sent_at IS NULL
                    AND w.next_attempt_at IS NOT NULL
                    AND w.next_attempt_at > now()
                    AND w.key = a.key
                    AND (w.xid, w.id) < (a.xid, a.id))
         OFFSET 0) l)
