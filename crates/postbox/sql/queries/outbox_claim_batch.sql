-- Claim the next batch of the partitions this relay worker owns, in (xid, id)
-- order, at most $1 rows, and take them in the same statement: the statement's
-- head (the placeholder on the first line below the comments) is
-- outbox_claim_mark.sql (sent = "mark": set sent_at) or outbox_claim_delete.sql
-- (sent = "delete"). The worker's transaction commits only after the broker
-- acknowledged every row; until then the rows are locked and other sessions
-- see them unsent, and a relay that dies rolls the take back with the rest.
-- When the broker did not take every row, the worker rolls the claim back and
-- writes each row's outcome in a new transaction (its partition locks keep
-- other relays away meanwhile). Taking in the claim saves a statement and a
-- round trip per batch, and the lock that a SELECT … FOR UPDATE writes on each
-- row before the mark writes it again (scripts/pgbench/relay.sh).
--
-- The subquery is one pair of branches per owned partition
-- (outbox_claim_partition.sql, joined by UNION ALL, filled in by
-- postbox::sql::Queries::outbox_claim): rows past the partition's position,
-- and rows at or below it of the transactions that were still open when the
-- position passed them (late commits). Each reads outbox_unsent_by_position
-- in order and a Merge Append takes the lowest across them, so the claim
-- reads about $1 rows however the backlog is spread, and never the dead
-- entries that sent rows leave below a position while an old snapshot keeps
-- VACUUM from removing them (migration 0010). Only owned partitions have a
-- branch: PostgreSQL sets up every branch of a plan at each execution.
--
-- Row locks, never SKIP LOCKED: order per key matters more than parallel
-- claims, and the advisory lock on each partition already keeps other relays
-- away. Rows waiting out a retry backoff hold back later rows of their key.
--
-- The rows are taken by id through the primary key (see migration 0010 for
-- why outbox_unsent_by_position cannot serve that).
--
-- The statement's snapshot comes back with every row: it tells the worker
-- which transactions may still commit rows below the new positions (the
-- same snapshot the claim read with: one statement). An uncorrelated
-- subquery is an InitPlan, computed once per claim; a CTE around the take,
-- joined to the snapshot, cost PostgreSQL about 5 % more per claim of 1,000
-- rows (benchmarks.md, "The claim's cost in PostgreSQL"). RETURNING gives no
-- order; the worker sorts the batch. `xid` comes back as the xid8 it is
-- (the worker reads its binary form), not cast to text and back per row.
--
-- The branches return (id, xid) in that order: it is the order of this
-- statement's own columns, so PostgreSQL passes their rows to the merge as
-- they are, without a projection per branch.
{take}
 WHERE o.id = ANY(ARRAY(
        SELECT c.id FROM ({each_partition}) c
         ORDER BY c.xid, c.id
         LIMIT $1))
   AND o.sent_at IS NULL
RETURNING o.id, o.xid, o.partition_id, o.event_id, coalesce(o.replay_topic, o.topic)::text AS topic,
          o.event::text AS event, o.key, o.payload, o.headers::jsonb AS headers, o.attempts,
          o.created_at, (SELECT pg_catalog.pg_current_snapshot()::text) AS snapshot
