-- A relay's health record for schema {schema} (see 0013_relay_health.sql),
-- written every health_interval, and what it needs of the others' records in
-- the same round trip. Times come as ages in milliseconds and are placed on
-- the server's clock, so relays on hosts with skewed clocks compare fairly.
-- $1 instance, $2 version, $3 host, $4 started_at, $5 lifetime (ms),
-- $6 taking_partitions, $7 owned_partitions, $8 unavailable for (ms, null
-- while every sink publishes), $9 last publish (ms ago), $10 confirmed (ms
-- ago), $11 sent_last_interval, $12 interval_ms, $13 sinks.
--
-- `can_publish`: other live relays (record not expired) with every sink
-- publishing and confirmed after this relay's outage began (plus one
-- interval, so a publish acknowledged just before a cut that hit every relay
-- does not count). `owning`: sessions holding a partition lock of the schema
-- (partition_try_acquire.sql), read from the locks themselves rather than
-- from records up to an interval old; it is asked only while this relay's
-- own workers hold none.
WITH mine AS (
    INSERT INTO {schema}.outbox_relays AS r
           (instance, version, host, started_at, reported_at, expires_at,
            taking_partitions, owned_partitions, unavailable_since,
            last_publish_at, confirmed_at, sent_last_interval, interval_ms, sinks)
    VALUES ($1, $2, $3, $4, now(), now() + make_interval(secs => $5::float8 / 1000),
            $6, $7, now() - make_interval(secs => $8::float8 / 1000),
            now() - make_interval(secs => $9::float8 / 1000),
            now() - make_interval(secs => $10::float8 / 1000),
            $11, $12, $13)
    ON CONFLICT (instance) DO UPDATE
       SET reported_at = excluded.reported_at,
           expires_at = excluded.expires_at,
           taking_partitions = excluded.taking_partitions,
           owned_partitions = excluded.owned_partitions,
           unavailable_since = excluded.unavailable_since,
           last_publish_at = excluded.last_publish_at,
           confirmed_at = excluded.confirmed_at,
           sent_last_interval = excluded.sent_last_interval,
           interval_ms = excluded.interval_ms,
           sinks = excluded.sinks
    RETURNING 1
)
SELECT count(*) FILTER (
           WHERE unavailable_since IS NULL
             AND ($8::bigint IS NULL
                  OR confirmed_at > now() - make_interval(secs => ($8::bigint - $12::int)::float8 / 1000))
       ) AS can_publish,
       (SELECT count(DISTINCT l.pid)
          FROM pg_locks l
         WHERE l.locktype = 'advisory'
           AND l.granted
           AND l.objsubid = 2
           AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
           AND l.classid::int4 = hashtext('postbox.partition.{schema}')) AS owning,
       (SELECT count(*) FROM mine) AS written
  FROM {schema}.outbox_relays
 WHERE instance <> $1
   AND expires_at > now()
