-- The second branch of outbox_claim_batch.sql for partition {partition}, only
-- in the claims of a worker with holes: its claimable rows at or below the
-- position ({after}) whose transaction is in {holes}, transactions that were
-- open when the position passed them. One index lookup of their own rows by
-- (partition_id, xid) per hole, however many dead entries lie below the
-- position, then a sort. Written as a lateral subquery that cannot be
-- flattened (OFFSET 0): as `xid = ANY(holes)`, the planner, which counts only
-- live rows in the index, preferred walking the whole partition with the
-- array as a filter. Left out when there are no holes: its sort, once per
-- partition, made PostgreSQL's generic plan read $1 rows of every partition
-- and sort them instead of merging the ordered scans (benchmarks.md,
-- "The claim without its hole branches").
(SELECT l.id, l.xid
   FROM unnest({holes}) h(xid),
        LATERAL (
         SELECT a.id, a.xid
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
                    AND w.key = a.key
                    AND (w.xid, w.id) < (a.xid, a.id))
         OFFSET 0) l)
