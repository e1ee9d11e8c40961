-- A relay's delivered counts since its last flush (maintenance.rs), added to
-- the current minute (migration 0011): $1 topics, $2 their counts.
INSERT INTO {schema}.outbox_delivered AS d (minute, topic, delivered)
SELECT date_trunc('minute', now()), t.topic, t.n
  FROM unnest($1::text[], $2::bigint[]) AS t(topic, n)
ON CONFLICT (minute, topic) DO UPDATE SET delivered = d.delivered + excluded.delivered
