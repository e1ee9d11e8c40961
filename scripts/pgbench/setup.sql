-- Tables for the outbox row's cost (run.sh, instructions.sh). pgb is migrated
-- by `postbox migrate --schema pgb --notify off` first; every variant is a copy
-- of its outbox with one thing taken away, so each difference is that thing's
-- cost. (LIKE ... INCLUDING ALL keeps the domains, the generated column and
-- the indexes; index names are the copy's.)
CREATE TABLE pgb.orders (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    customer int NOT NULL,
    amount numeric(12,2) NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);
-- A second business table as wide as the outbox row the producers write: the
-- bar the outbox row is held to.
CREATE TABLE pgb.plain (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    topic text NOT NULL,
    event text NOT NULL,
    key text,
    payload jsonb NOT NULL,
    headers jsonb NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE pgb.outbox_no_unique (LIKE pgb.outbox INCLUDING ALL);
ALTER TABLE pgb.outbox_no_unique DROP CONSTRAINT outbox_no_unique_event_id_key;

CREATE TABLE pgb.outbox_no_partition (LIKE pgb.outbox INCLUDING ALL);
ALTER TABLE pgb.outbox_no_partition DROP COLUMN partition_id;  -- and its index

CREATE TABLE pgb.outbox_no_partial (LIKE pgb.outbox INCLUDING ALL);
DROP INDEX pgb.outbox_no_partial_partition_id_expr_idx;
DROP INDEX pgb.outbox_no_partial_key_id_idx;

-- The checks are the column types' (domains since migration 0008).
CREATE TABLE pgb.outbox_no_checks (LIKE pgb.outbox INCLUDING ALL);
ALTER TABLE pgb.outbox_no_checks ALTER COLUMN topic TYPE text,
    ALTER COLUMN event TYPE text, ALTER COLUMN headers TYPE jsonb;

-- Everything above taken away at once: the columns and the primary key only.
CREATE TABLE pgb.outbox_bare (LIKE pgb.outbox INCLUDING DEFAULTS INCLUDING IDENTITY);
ALTER TABLE pgb.outbox_bare ADD PRIMARY KEY (id),
    ALTER COLUMN topic TYPE text, ALTER COLUMN event TYPE text,
    ALTER COLUMN headers TYPE jsonb;

-- The partition as the claim index's expression instead of a stored
-- generated column (measured, not migrated: docs/src/benchmarks.md says why):
-- PostgreSQL keeps an index's expression parsed in its relation cache, a
-- generated column's it reads back from the catalog in every writing statement.
CREATE TABLE pgb.outbox_partition_expr (LIKE pgb.outbox INCLUDING ALL);
ALTER TABLE pgb.outbox_partition_expr DROP COLUMN partition_id;  -- and its index
CREATE INDEX ON pgb.outbox_partition_expr (pgb.postbox_outbox_partition(key, event_id), (id + 0))
    WHERE sent_at IS NULL;

CREATE TABLE pgb.outbox_partition_inline (LIKE pgb.outbox INCLUDING ALL);
ALTER TABLE pgb.outbox_partition_inline DROP COLUMN partition_id;  -- and its index
CREATE INDEX ON pgb.outbox_partition_inline
    (((hashtextextended(coalesce(key, event_id::text), 0) & 63)::smallint), (id + 0))
    WHERE sent_at IS NULL;

-- The row as migrations 0001-0007 made it: CHECK constraints, which
-- PostgreSQL reads back from the catalog and plans in every writing statement,
-- and the partition expression inline.
CREATE TABLE pgb.outbox_0007 (LIKE pgb.outbox INCLUDING ALL);
ALTER TABLE pgb.outbox_0007
    ALTER COLUMN topic TYPE text, ADD CHECK (topic <> ''),
    ALTER COLUMN event TYPE text, ADD CHECK (event <> ''),
    ALTER COLUMN headers TYPE jsonb, ADD CHECK (jsonb_typeof(headers) = 'object'),
    DROP COLUMN partition_id,
    ADD COLUMN partition_id smallint GENERATED ALWAYS AS (
        ((hashtextextended(coalesce(key, event_id::text), 0) % 64 + 64) % 64)::smallint
    ) STORED;
CREATE INDEX ON pgb.outbox_0007 (partition_id, (id + 0)) WHERE sent_at IS NULL;

-- The default wake-up (`--notify adaptive`): the outbox with its deferred
-- per-row trigger. No relay holds an armed lock here, as while one drains, so
-- no NOTIFY is sent.
CREATE TABLE pgb.outbox_adaptive (LIKE pgb.outbox INCLUDING ALL);
CREATE CONSTRAINT TRIGGER outbox_notify_adaptive
    AFTER INSERT ON pgb.outbox_adaptive
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW EXECUTE FUNCTION pgb.postbox_outbox_notify_adaptive();

-- The same with the trigger of migrations 0005-0008: a flag read from
-- outbox_wakeup per row, all flags down as while a relay drains.
CREATE FUNCTION pgb.notify_adaptive_0008() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog AS $$
BEGIN
    PERFORM pg_advisory_xact_lock_shared(hashtext('postbox.wakeup.' || TG_TABLE_SCHEMA), 0);
    IF EXISTS (SELECT 1 FROM pgb.outbox_wakeup w
                WHERE w.partition_id = NEW.partition_id AND w.armed) THEN
        PERFORM pg_notify('postbox_outbox', TG_TABLE_SCHEMA);
    END IF;
    RETURN NULL;
END;
$$;
CREATE TABLE pgb.outbox_adaptive_0008 (LIKE pgb.outbox INCLUDING ALL);
CREATE CONSTRAINT TRIGGER outbox_notify_adaptive
    AFTER INSERT ON pgb.outbox_adaptive_0008
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW EXECUTE FUNCTION pgb.notify_adaptive_0008();
UPDATE pgb.outbox_wakeup SET armed = false;

-- The default wake-up's trigger on that row: no stored partition_id, so the
-- trigger computes it.
CREATE FUNCTION pgb.notify_adaptive_partition_expr() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NOT pg_catalog.pg_try_advisory_xact_lock_shared(
            pg_catalog.hashtext('postbox.armed.' OPERATOR(pg_catalog.||) TG_TABLE_SCHEMA),
            (pg_catalog.hashtextextended(COALESCE(NEW.key, NEW.event_id::pg_catalog.text), 0)
             OPERATOR(pg_catalog.&) 63)::pg_catalog.int4) THEN
        PERFORM pg_catalog.pg_notify('postbox_outbox', TG_TABLE_SCHEMA);
    END IF;
    RETURN NULL;
END;
$$;
CREATE TABLE pgb.outbox_adaptive_partition_expr (LIKE pgb.outbox_partition_expr INCLUDING ALL);
CREATE CONSTRAINT TRIGGER outbox_notify_adaptive
    AFTER INSERT ON pgb.outbox_adaptive_partition_expr
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW EXECUTE FUNCTION pgb.notify_adaptive_partition_expr();
