-- The inbox: one row per (consumer, message) already handled. Consumers insert
-- here in the same transaction as their effect; a conflict means "duplicate".
CREATE TABLE {schema}.inbox (
    consumer    text        NOT NULL,
    message_id  text        NOT NULL,
    received_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (consumer, message_id)
);
CREATE INDEX inbox_received_at ON {schema}.inbox (received_at);
