-- A cheaper outbox row for producers: the same columns, the same checks, the
-- same partitions, less work per INSERT.
--
-- PostgreSQL reads a table's CHECK constraints and generated-column
-- expressions from the catalog text and plans them again in every statement
-- that writes a row (and checks the CHECKs again on every UPDATE). For a
-- one-row INSERT that was most of the outbox row's extra cost over a plain row.
-- Domains keep their checks planned in the type cache, and a generated column
-- that calls one function has a small expression to read back.
-- (scripts/pgbench/instructions.sh measures each part; docs: benchmarks.md.)
--
-- Rewrites the table once (the new generated column, the domain checks) and
-- holds off inserts meanwhile: run it when the outbox is small.

-- The ordering partition of a key, as 0001 defined it: hashtextextended's
-- value modulo 64 (`& 63` is the same for negative values in two's
-- complement), so every key keeps its partition across this migration.
-- Operators and functions are schema-qualified because the body runs with the
-- producer's search_path.
CREATE FUNCTION {schema}.postbox_outbox_partition(key text, event_id uuid) RETURNS smallint
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
BEGIN
    RETURN (pg_catalog.hashtextextended(COALESCE(key, event_id::pg_catalog.text), 0)
            OPERATOR(pg_catalog.&) 63)::pg_catalog.int2;
END;
$$;

CREATE DOMAIN {schema}.postbox_topic AS text
    CONSTRAINT outbox_topic_check CHECK (VALUE <> '');
CREATE DOMAIN {schema}.postbox_event_type AS text
    CONSTRAINT outbox_event_check CHECK (VALUE <> '');
CREATE DOMAIN {schema}.postbox_headers AS jsonb
    CONSTRAINT outbox_headers_check CHECK (jsonb_typeof(VALUE) = 'object');

-- Dropping partition_id drops outbox_unsent_by_partition; it is made again below.
ALTER TABLE {schema}.outbox
    DROP CONSTRAINT outbox_topic_check,
    DROP CONSTRAINT outbox_event_check,
    DROP CONSTRAINT outbox_headers_check,
    ALTER COLUMN topic TYPE {schema}.postbox_topic,
    ALTER COLUMN event TYPE {schema}.postbox_event_type,
    ALTER COLUMN headers TYPE {schema}.postbox_headers,
    DROP COLUMN partition_id,
    ADD COLUMN partition_id smallint
        GENERATED ALWAYS AS ({schema}.postbox_outbox_partition(key, event_id)) STORED;

CREATE INDEX outbox_unsent_by_partition ON {schema}.outbox (partition_id, (id + 0))
    WHERE sent_at IS NULL;
