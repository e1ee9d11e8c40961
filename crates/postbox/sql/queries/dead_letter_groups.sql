-- The console's dead-letter groups: the relay's dead letters matching the
-- filters (as in dead_letter_list.sql, $1..$7), grouped by their error's
-- fingerprint (migration 0011), largest first: how many, first and last
-- seen, one full error, up to five topics. $8 the most groups returned.
SELECT d.fingerprint,
       count(*) AS count,
       min(d.dead_at) AS first_dead_at,
       max(d.dead_at) AS last_dead_at,
       min(d.last_error) AS example_error,
       (array_agg(DISTINCT d.topic ORDER BY d.topic))[1:5] AS topics
  FROM {schema}.outbox_dead_letter d
 WHERE ($1::text IS NULL OR d.topic = $1)
   AND ($2::text IS NULL OR d.key = $2)
   AND ($3::float8 IS NULL OR d.dead_at < now() - make_interval(secs => $3))
   AND ($4::float8 IS NULL OR d.dead_at > now() - make_interval(secs => $4))
   AND ($5::text IS NULL OR strpos(lower(d.last_error), lower($5)) > 0)
   AND ($6::bigint[] IS NULL OR d.id = ANY($6))
   AND ($7::text IS NULL OR d.fingerprint = $7)
 GROUP BY d.fingerprint
 ORDER BY count(*) DESC, d.fingerprint
 LIMIT $8
