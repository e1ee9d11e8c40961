-- `postbox status`, per topic: unsent rows, the age of the oldest (seconds),
-- rows waiting out a retry backoff, dead letters. Reads unsent rows only
-- (the outbox_unsent_by_position index), never the sent history.
WITH pending AS (
    SELECT topic,
           count(*) AS pending,
           min(created_at) AS oldest,
           count(*) FILTER (WHERE next_attempt_at > now()) AS retrying
      FROM {schema}.outbox
     WHERE sent_at IS NULL AND partition_id IS NOT NULL
     GROUP BY topic
), dead AS (
    SELECT topic, count(*) AS dead_letters
      FROM {schema}.outbox_dead_letter
     GROUP BY topic
)
SELECT topic,
       coalesce(p.pending, 0) AS pending,
       -- NULL when nothing is pending (greatest() would turn NULL into 0).
       CASE WHEN p.oldest IS NOT NULL
            THEN greatest(extract(epoch FROM now() - p.oldest), 0)::float8
       END AS oldest_pending_age_seconds,
       coalesce(p.retrying, 0) AS retrying,
       coalesce(d.dead_letters, 0) AS dead_letters
  FROM pending p
  FULL JOIN dead d USING (topic)
 ORDER BY topic
