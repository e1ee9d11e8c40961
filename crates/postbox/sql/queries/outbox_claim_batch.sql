-- Claim the next batch of the partitions this relay worker owns, in id
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
-- The subquery is one branch per owned partition (outbox_claim_partition.sql,
-- joined by UNION ALL, filled in by postbox::sql::Queries::outbox_claim):
-- each reads its partition's unsent rows in id order from
-- outbox_unsent_by_partition, and a Merge Append takes the lowest ids across
-- them, so the claim reads about $1 rows however the backlog is spread. A
-- single scan in id order filtered by partition read every other partition's
-- backlog when this worker's own partitions were empty or sparse. Only owned
-- partitions have a branch: PostgreSQL sets up every branch of a plan at each
-- execution, and 64 of them tripled what an empty claim costs, which a relay
-- that keeps up pays at every busy poll.
--
-- Row locks, never SKIP LOCKED: order per key matters more than parallel
-- claims, and the advisory lock on each partition already keeps other relays
-- away. Rows waiting out a retry backoff hold back later rows of their key.
-- No high-water mark: a row whose transaction commits late (lower id than
-- rows already sent) is still found here on the next scan. RETURNING gives no
-- order; the worker sorts the batch by id.
{take}
 WHERE o.id = ANY(ARRAY(
        SELECT c.id FROM ({each_partition}) c
         ORDER BY c.id
         LIMIT $1))
   AND o.sent_at IS NULL
RETURNING o.id, o.event_id, o.topic, o.event, o.key, o.payload, o.headers, o.attempts, o.created_at
