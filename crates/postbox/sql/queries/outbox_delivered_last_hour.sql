-- The console's chart: events delivered per minute over the last hour (all
-- topics), oldest first; minutes without deliveries are absent.
SELECT minute, sum(delivered)::bigint AS delivered
  FROM {schema}.outbox_delivered
 WHERE minute >= date_trunc('minute', now()) - interval '59 minutes'
 GROUP BY minute
 ORDER BY minute
