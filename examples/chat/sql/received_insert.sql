INSERT INTO {schema}.received (message_id, chat_id, body, sender, sent_at) VALUES ($1, $2, $3, $4, $5)
