-- The chat's own tables in one service's schema (next to postbox's outbox and
-- inbox). Each service reads and writes only its own schema.
CREATE TABLE IF NOT EXISTS {schema}.chats (
    id    bigint PRIMARY KEY,
    title text   NOT NULL
);
INSERT INTO {schema}.chats (id, title)
VALUES (1, 'General'), (2, 'Support'), (3, 'Random')
ON CONFLICT (id) DO NOTHING;

-- Messages this service sent. delivered_at is set when the peer's receipt arrives.
CREATE TABLE IF NOT EXISTS {schema}.messages (
    id           uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    chat_id      bigint      NOT NULL REFERENCES {schema}.chats (id),
    body         text        NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT clock_timestamp(),
    delivered_at timestamptz
);
CREATE INDEX IF NOT EXISTS messages_chat ON {schema}.messages (chat_id, created_at);

-- Messages received from the peer, recorded once (the postbox inbox guards it).
CREATE TABLE IF NOT EXISTS {schema}.received (
    message_id  uuid        PRIMARY KEY,
    chat_id     bigint      NOT NULL,
    body        text        NOT NULL,
    sender      text        NOT NULL,
    sent_at     timestamptz NOT NULL,
    received_at timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX IF NOT EXISTS received_chat ON {schema}.received (chat_id, sent_at);
