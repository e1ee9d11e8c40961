-- The relays' fleet gauge (`postbox_relays{schema, state}`): how many relays
-- of schema {schema} are in each state, by their health records. A relay
-- standing by owns nothing; one that cannot publish still owns partitions,
-- whose events wait.
SELECT state, count(*)
  FROM (SELECT CASE
                 WHEN expires_at <= now() THEN 'stale'
                 WHEN unavailable_since IS NULL THEN 'publishing'
                 WHEN owned_partitions > 0 THEN 'cannot_publish'
                 ELSE 'standing_by'
               END AS state
          FROM {schema}.outbox_relays) AS r
 GROUP BY state
