-- `postbox dlq purge --yes`: delete the matching dead letters (filters as in
-- dead_letter_list.sql).
DELETE FROM {schema}.outbox_dead_letter d
 WHERE ($1::text IS NULL OR d.topic = $1)
   AND ($2::text IS NULL OR d.key = $2)
   AND ($3::float8 IS NULL OR d.dead_at < now() - make_interval(secs => $3))
   AND ($4::float8 IS NULL OR d.dead_at > now() - make_interval(secs => $4))
   AND ($5::text IS NULL OR strpos(lower(d.last_error), lower($5)) > 0)
   AND ($6::bigint[] IS NULL OR d.id = ANY($6))
   AND ($7::text IS NULL OR d.fingerprint = $7)
RETURNING d.id, d.event_id, d.topic, d.key
