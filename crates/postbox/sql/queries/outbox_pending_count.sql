SELECT count(*) FROM {schema}.outbox WHERE sent_at IS NULL AND partition_id IS NOT NULL
