-- Tables for the outbox row's cost (run.sh). pgb is migrated by `postbox migrate
-- --schema pgb --notify off` first; every variant is a copy of its outbox with
-- one thing taken away, so each difference in throughput is that thing's cost.
-- (LIKE ... INCLUDING ALL keeps the source's names for CHECK constraints.)
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
ALTER TABLE pgb.outbox_no_partition DROP COLUMN partition_id;

CREATE TABLE pgb.outbox_no_partial (LIKE pgb.outbox INCLUDING ALL);
DROP INDEX pgb.outbox_no_partial_id_idx;
DROP INDEX pgb.outbox_no_partial_key_id_idx;

CREATE TABLE pgb.outbox_no_checks (LIKE pgb.outbox INCLUDING ALL);
ALTER TABLE pgb.outbox_no_checks DROP CONSTRAINT outbox_topic_check,
    DROP CONSTRAINT outbox_event_check,
    DROP CONSTRAINT outbox_headers_check;

-- Everything above taken away at once: the columns and the primary key only.
CREATE TABLE pgb.outbox_bare (LIKE pgb.outbox INCLUDING DEFAULTS INCLUDING IDENTITY);
ALTER TABLE pgb.outbox_bare ADD PRIMARY KEY (id);
