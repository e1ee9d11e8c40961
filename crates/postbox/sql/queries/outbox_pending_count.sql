SELECT count(*) FROM {schema}.outbox WHERE sent_at IS NULL
