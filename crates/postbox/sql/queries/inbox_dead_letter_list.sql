-- `postbox inbox-dlq list|show` and the dry run of replay/purge: consumer dead
-- letters matching the filters, oldest first. Every filter is a bind
-- parameter, NULL = no filter; the same WHERE clause is in
-- inbox_dead_letter_replay.sql and inbox_dead_letter_purge.sql.
-- $1 consumer, $2 topic, $3 key, $4 dead more than $4 seconds ago, $5 dead
-- less than $5 seconds ago, $6 substring of last_error (case-insensitive),
-- $7 ids, $8 error fingerprint (migration 0011), $9 limit (NULL = all), $10
-- only ids above (the next page; NULL = from the first). `matching` counts
-- every match, whatever the limit.
SELECT d.id, d.consumer, d.message_id, d.topic, d.name, d.key, d.payload, d.headers,
       d.source, d.attempts, d.last_error, d.first_failed_at, d.dead_at, d.replay_at,
       d.fingerprint,
       count(*) OVER () AS matching
  FROM {schema}.inbox_dead_letter d
 WHERE ($1::text IS NULL OR d.consumer = $1)
   AND ($2::text IS NULL OR d.topic = $2)
   AND ($3::text IS NULL OR d.key = $3)
   AND ($4::float8 IS NULL OR d.dead_at < now() - make_interval(secs => $4))
   AND ($5::float8 IS NULL OR d.dead_at > now() - make_interval(secs => $5))
   AND ($6::text IS NULL OR strpos(lower(d.last_error), lower($6)) > 0)
   AND ($7::bigint[] IS NULL OR d.id = ANY($7))
   AND ($8::text IS NULL OR d.fingerprint = $8)
   AND ($10::bigint IS NULL OR d.id > $10)
 ORDER BY d.id
 LIMIT $9
