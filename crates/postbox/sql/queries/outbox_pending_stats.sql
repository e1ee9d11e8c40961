-- Per topic: unsent rows and the age of the oldest (the relay's lag).
SELECT topic,
       count(*)::bigint AS pending,
       coalesce(extract(epoch FROM now() - min(created_at)), 0)::float8 AS oldest_age_seconds
  FROM {schema}.outbox
 WHERE sent_at IS NULL AND partition_id IS NOT NULL
 GROUP BY topic
