-- The operator console (`postbox console`): dead letters grouped by the shape
-- of their error, and a record of what operators did.
--
-- A dead letter's fingerprint is its last_error with what differs between
-- events of one failure normalised: UUIDs become <id>, hex words of 16 digits
-- or more (trace ids, hashes) <hex>, numbers N ("(attempt 3 of 10)" and
-- "(attempt 5 of 10)" are one failure, "2048 bytes" and "4096 bytes" too).
-- Digits inside a name stay ("orders-v2", "t_9f3a": another exchange is
-- another failure). Stored, so grouping 100,000 dead letters reads an index
-- instead of running three regular expressions per row.
ALTER TABLE {schema}.outbox_dead_letter
  ADD COLUMN fingerprint text NOT NULL GENERATED ALWAYS AS (
    left(regexp_replace(regexp_replace(regexp_replace(last_error,
      '[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}', '<id>', 'g'),
      '\m[0-9a-fA-F]{16,}\M', '<hex>', 'g'),
      '(^|[^A-Za-z0-9_])[0-9]+', '\1N', 'g'), 1000)
  ) STORED;
CREATE INDEX outbox_dead_letter_fingerprint
    ON {schema}.outbox_dead_letter (fingerprint, dead_at);

ALTER TABLE {schema}.inbox_dead_letter
  ADD COLUMN fingerprint text NOT NULL GENERATED ALWAYS AS (
    left(regexp_replace(regexp_replace(regexp_replace(last_error,
      '[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}', '<id>', 'g'),
      '\m[0-9a-fA-F]{16,}\M', '<hex>', 'g'),
      '(^|[^A-Za-z0-9_])[0-9]+', '\1N', 'g'), 1000)
  ) STORED;
CREATE INDEX inbox_dead_letter_fingerprint
    ON {schema}.inbox_dead_letter (fingerprint, dead_at);

-- Every replay and purge an operator made through the console (or its API):
-- who, when, what, on which selection, and how many rows it touched.
CREATE TABLE {schema}.console_audit (
    id        bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at        timestamptz NOT NULL DEFAULT now(),
    actor     text        NOT NULL,   -- the console user's name
    action    text        NOT NULL,   -- e.g. dead_letters.replay, consumer_dead_letters.purge
    selection jsonb       NOT NULL,   -- the filter the action applied
    count     int         NOT NULL    -- rows touched
);

-- Events delivered per minute and topic, as the relays count them: what the
-- console's chart of the last hour reads (sent rows may be deleted at once, or
-- by retention). Each relay adds its counts every stats_interval; the relay's
-- maintenance deletes minutes older than a day. A relay killed between two
-- flushes loses its last few seconds of counts: a figure, not a ledger.
CREATE TABLE {schema}.outbox_delivered (
    minute    timestamptz NOT NULL,
    topic     text        NOT NULL,
    delivered bigint      NOT NULL,
    PRIMARY KEY (minute, topic)
);
