-- The outbox: one row per event, written by producers inside their business
-- transaction and moved to a broker by `postbox relay`. Column names are the
-- public contract for producers in any language (see README "Producing from SQL").
CREATE TABLE {schema}.outbox (
    id              bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    event_id        uuid        NOT NULL DEFAULT gen_random_uuid() UNIQUE,
    topic           text        NOT NULL CHECK (topic <> ''),
    event           text        NOT NULL CHECK (event <> ''),
    key             text,
    payload         jsonb       NOT NULL,
    headers         jsonb       NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(headers) = 'object'),
    created_at      timestamptz NOT NULL DEFAULT now(),
    attempts        int         NOT NULL DEFAULT 0,
    last_error      text,
    next_attempt_at timestamptz,
    sent_at         timestamptz,
    -- Ordering partition (0..63). Events of one key share a partition; a
    -- partition is relayed by one relay worker at a time, in id order. Rows
    -- without a key spread over all partitions by their event id.
    partition_id    smallint    GENERATED ALWAYS AS (
        ((hashtextextended(coalesce(key, event_id::text), 0) % 64 + 64) % 64)::smallint
    ) STORED
);

-- The relay's claim scan: unsent rows in id order. Small because sent rows
-- leave it (and retention deletes them).
CREATE INDEX outbox_unsent ON {schema}.outbox (id) WHERE sent_at IS NULL;

-- Rows waiting out a retry backoff: the claim skips later rows of their key.
CREATE INDEX outbox_waiting ON {schema}.outbox (key, id)
    WHERE sent_at IS NULL AND next_attempt_at IS NOT NULL;
