-- Claim the next batch of the partitions ($2) this relay worker owns, in id
-- order, at most $1 rows: the claim of a worker that keeps up.
--
-- It reads every claimable row of the owned partitions through one index
-- scan of outbox_unsent_by_partition and sorts them, where
-- outbox_claim_batch.sql merges one ordered scan per partition and so never
-- reads much more than $1 rows. Setting up those branches is most of what a
-- claim costs while the backlog is a few rows (sixteen branches: about
-- 590,000 CPU instructions for an empty claim, this one about 90,000;
-- scripts/pgbench/relay.sh), so a worker uses this claim after a pass that
-- found less than a batch, and the merge again once this one comes back full.
-- One pass of a worker that meets a sudden large backlog reads all of it here.
--
-- `ORDER BY a.id + 0`, not `a.id`: ordered by id, the planner walks the
-- primary key and filters by partition, reading every other partition's rows.
-- Locks, sent rows, backoffs and late commits: as outbox_claim_batch.sql.
SELECT o.id, o.event_id, o.topic, o.event, o.key, o.payload, o.headers, o.attempts, o.created_at
  FROM {schema}.outbox o
 WHERE o.id = ANY(ARRAY(
        SELECT a.id
          FROM {schema}.outbox a
         WHERE a.sent_at IS NULL
           AND a.partition_id = ANY($2::smallint[])
           AND (a.next_attempt_at IS NULL OR a.next_attempt_at <= now())
           AND NOT EXISTS (
                SELECT 1 FROM {schema}.outbox w
                 WHERE w.sent_at IS NULL
                   AND w.next_attempt_at IS NOT NULL
                   AND w.next_attempt_at > now()
                   AND w.key = a.key
                   AND w.id < a.id)
         ORDER BY a.id + 0
         LIMIT $1))
   AND o.sent_at IS NULL
 ORDER BY o.id
 FOR UPDATE OF o
