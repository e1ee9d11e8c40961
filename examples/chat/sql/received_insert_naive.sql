-- v1 (the naive version of the seed): no inbox, a redelivery is shown again.
INSERT INTO {schema}.received (message_id, chat_id, body, sender, sent_at) VALUES ($1, $2, $3, $4, $5)
ON CONFLICT (message_id) DO NOTHING
