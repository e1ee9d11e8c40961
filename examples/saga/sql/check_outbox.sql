-- Every event this schema wrote (sent rows stay until the relay's retention, 1 h by default).
SELECT event_id::text, topic, sent_at IS NOT NULL AS sent FROM {schema}.outbox
