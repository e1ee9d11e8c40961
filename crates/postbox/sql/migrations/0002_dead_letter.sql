-- Rows the relay gave up on after max_attempts poison failures, with the
-- reason. Kept apart so the outbox scan stays small; `postbox dlq` reads here.
CREATE TABLE {schema}.outbox_dead_letter (
    id          bigint      PRIMARY KEY,           -- the row's id in the outbox
    event_id    uuid        NOT NULL UNIQUE,
    topic       text        NOT NULL,
    event       text        NOT NULL,
    key         text,
    payload     jsonb       NOT NULL,
    headers     jsonb       NOT NULL,
    created_at  timestamptz NOT NULL,
    attempts    int         NOT NULL,
    last_error  text        NOT NULL,
    dead_at     timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX outbox_dead_letter_dead_at ON {schema}.outbox_dead_letter (dead_at);
