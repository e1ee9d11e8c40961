-- The dry run of `postbox replay`: per topic, how many sent rows still
-- retained a replay would send again. $1, $2: created_at from (inclusive) and
-- until (exclusive); $3: topics (NULL: all); $4: key (NULL: any); $5: only
-- ids above this one (a resumed replay). Reads every retained row of the range
-- once: sent rows have no index of their own, and a replay is rare.
SELECT topic::text AS topic,
       count(*) AS events,
       min(id) AS first_id,
       max(id) AS last_id,
       min(created_at) AS first_created_at,
       max(created_at) AS last_created_at
  FROM {schema}.outbox
 WHERE sent_at IS NOT NULL
   AND created_at >= $1
   AND created_at < $2
   AND ($3::text[] IS NULL OR topic = ANY($3::text[]))
   AND ($4::text IS NULL OR key = $4)
   AND id > $5
 GROUP BY topic
 ORDER BY topic
