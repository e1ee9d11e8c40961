-- `postbox inbox-dlq purge --yes`: delete consumer dead letters for good.
-- Filters as in inbox_dead_letter_list.sql.
DELETE FROM {schema}.inbox_dead_letter d
 WHERE ($1::text IS NULL OR d.consumer = $1)
   AND ($2::text IS NULL OR d.topic = $2)
   AND ($3::text IS NULL OR d.key = $3)
   AND ($4::float8 IS NULL OR d.dead_at < now() - make_interval(secs => $4))
   AND ($5::float8 IS NULL OR d.dead_at > now() - make_interval(secs => $5))
   AND ($6::text IS NULL OR strpos(lower(d.last_error), lower($6)) > 0)
   AND ($7::bigint[] IS NULL OR d.id = ANY($7))
   AND ($8::text IS NULL OR d.fingerprint = $8)
RETURNING d.id, d.consumer, d.message_id, d.topic
