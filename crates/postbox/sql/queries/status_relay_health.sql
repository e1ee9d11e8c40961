-- `postbox status`, the console and the relays' fleet gauges: every relay's
-- health record (0013_relay_health.sql), with whether it is stale and how
-- long ago it reported, by the server's clock.
SELECT instance,
       version,
       host,
       started_at,
       reported_at,
       expires_at <= now() AS stale,
       extract(epoch FROM now() - reported_at)::float8 AS reported_seconds_ago,
       taking_partitions,
       owned_partitions,
       unavailable_since,
       extract(epoch FROM now() - unavailable_since)::float8 AS unavailable_seconds,
       last_publish_at,
       confirmed_at,
       sent_last_interval,
       interval_ms,
       sinks
  FROM {schema}.outbox_relays
 ORDER BY instance
