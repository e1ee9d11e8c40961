-- The consumer side's dead letters: messages a consumer's handler failed on
-- `attempts` times (its retry policy), kept whole so an operator can read the
-- error and replay them (`postbox inbox-dlq`). A replayed row is taken by a
-- running consumer of that name, which records the message in the inbox and
-- deletes the row in the transaction of the effect.
CREATE TABLE {schema}.inbox_dead_letter (
    id              bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    consumer        text        NOT NULL,
    message_id      text        NOT NULL,
    topic           text        NOT NULL,
    name            text,
    key             text,
    payload         bytea       NOT NULL,
    headers         jsonb       NOT NULL,      -- [[name, value], ...] in arrival order
    source          text        NOT NULL,      -- the broker's coordinates
    attempts        int         NOT NULL,
    last_error      text        NOT NULL,
    first_failed_at timestamptz NOT NULL DEFAULT now(),
    dead_at         timestamptz NOT NULL DEFAULT now(),
    replay_at       timestamptz,               -- set by `postbox inbox-dlq replay`
    UNIQUE (consumer, message_id)
);
CREATE INDEX inbox_dead_letter_dead_at ON {schema}.inbox_dead_letter (dead_at);
-- What consumers poll for: tiny, since almost no row waits for a replay.
CREATE INDEX inbox_dead_letter_replay ON {schema}.inbox_dead_letter (consumer, id)
 WHERE replay_at IS NOT NULL;
