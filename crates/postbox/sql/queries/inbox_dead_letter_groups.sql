-- The console's consumer dead-letter groups: consumer dead letters matching
-- the filters (as in inbox_dead_letter_list.sql, $1..$8), grouped by their
-- error's fingerprint (migration 0011), largest first. $9 the most groups.
SELECT d.fingerprint,
       count(*) AS count,
       min(d.dead_at) AS first_dead_at,
       max(d.dead_at) AS last_dead_at,
       min(d.last_error) AS example_error,
       (array_agg(DISTINCT d.topic ORDER BY d.topic))[1:5] AS topics
  FROM {schema}.inbox_dead_letter d
 WHERE ($1::text IS NULL OR d.consumer = $1)
   AND ($2::text IS NULL OR d.topic = $2)
   AND ($3::text IS NULL OR d.key = $3)
   AND ($4::float8 IS NULL OR d.dead_at < now() - make_interval(secs => $4))
   AND ($5::float8 IS NULL OR d.dead_at > now() - make_interval(secs => $5))
   AND ($6::text IS NULL OR strpos(lower(d.last_error), lower($6)) > 0)
   AND ($7::bigint[] IS NULL OR d.id = ANY($7))
   AND ($8::text IS NULL OR d.fingerprint = $8)
 GROUP BY d.fingerprint
 ORDER BY count(*) DESC, d.fingerprint
 LIMIT $9
