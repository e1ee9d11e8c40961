-- `postbox dlq list|show` and the dry run of replay/purge: dead letters matching
-- the filters, in dead-letter id order (= their original outbox order). Every
-- filter is a bind parameter, NULL = no filter; the same WHERE clause is in
-- dead_letter_replay.sql and dead_letter_purge.sql.
-- $1 topic, $2 key, $3 dead more than $3 seconds ago, $4 dead less than $4
-- seconds ago, $5 substring of last_error (case-insensitive), $6 ids, $7 error
-- fingerprint (migration 0011), $8 limit (NULL = all), $9 only ids above (the
-- next page; NULL = from the first). `matching` counts every match, whatever the limit; `in_outbox`
-- flags an event_id the outbox already holds again (replay would conflict).
SELECT d.id, d.event_id, d.topic, d.event, d.key, d.payload, d.headers, d.created_at,
       d.attempts, d.last_error, d.dead_at,
       EXISTS (SELECT 1 FROM {schema}.outbox o WHERE o.event_id = d.event_id) AS in_outbox,
       d.fingerprint,
       count(*) OVER () AS matching
  FROM {schema}.outbox_dead_letter d
 WHERE ($1::text IS NULL OR d.topic = $1)
   AND ($2::text IS NULL OR d.key = $2)
   AND ($3::float8 IS NULL OR d.dead_at < now() - make_interval(secs => $3))
   AND ($4::float8 IS NULL OR d.dead_at > now() - make_interval(secs => $4))
   AND ($5::text IS NULL OR strpos(lower(d.last_error), lower($5)) > 0)
   AND ($6::bigint[] IS NULL OR d.id = ANY($6))
   AND ($7::text IS NULL OR d.fingerprint = $7)
   AND ($9::bigint IS NULL OR d.id > $9)
 ORDER BY d.id
 LIMIT $8
