-- A read path whose cost does not grow with the age of the oldest snapshot.
--
-- Each row sent leaves a dead entry in the claim's index until VACUUM may
-- remove it, which it may not while any snapshot older than the send exists
-- (pg_dump, an analytics query, a session idle in transaction, a standby with
-- hot_standby_feedback). A claim that reads each partition from its head
-- walked every such entry: 4 minutes of a held snapshot at 1,000 events/s
-- made claims of 1-9 s. A relay worker now keeps, per partition, the position
-- of what it has taken, and starts each claim there (outbox_claim_batch.sql).
--
-- The position is (xid, id): xid is the producer's transaction. Transaction
-- ids order commits causally (a transaction that committed before another
-- began has the lower id), so (xid, id) keeps the promise of per-key causal
-- order, and a snapshot names exactly the transactions that may still add
-- rows below a position: the worker looks those up by xid until they end
-- (docs: "How the relay reads the outbox").
--
-- Rows written before this migration get xid 1: they are all committed (the
-- ALTER waits for every open writer of the table) and keep their id order.
-- A constant default is stored in the catalog, so the table is not rewritten;
-- new rows then take their transaction's id.
ALTER TABLE {schema}.outbox ADD COLUMN xid xid8 NOT NULL DEFAULT '1';
ALTER TABLE {schema}.outbox ALTER COLUMN xid SET DEFAULT pg_catalog.pg_current_xact_id();

-- The claim reads this index from a partition's position in (xid, id) order.
-- It replaces outbox_unsent_by_partition (the same rows), so a producer's
-- insert adds no index entry it did not add before; the entry is 8 bytes
-- wider. `id + 0`, not `id`, as in 0007: with a plain `id` column here, the
-- planner found rows by id (the claim's take, marks, retries) through this
-- index, reading it whole, rather than through the primary key. And
-- `partition_id IS NOT NULL` in the predicate (always true: every row has a
-- partition), which only the statements that mean to read this index say:
-- a statement that finds unsent rows another way (the claim's take by id,
-- its look for a key's waiting rows) cannot use it. The planner counts only
-- live entries, so on a table whose statistics are young it took this index
-- for those too, and read it whole, dead entries included.
-- Building it scans the table once and holds off inserts meanwhile.
CREATE INDEX outbox_unsent_by_position ON {schema}.outbox (partition_id, xid, (id + 0))
    WHERE sent_at IS NULL AND partition_id IS NOT NULL;

DROP INDEX {schema}.outbox_unsent_by_partition;
