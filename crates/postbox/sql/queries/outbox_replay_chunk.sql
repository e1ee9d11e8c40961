-- One chunk of `postbox replay` (parameters as outbox_replay_plan.sql, $6 the
-- chunk size): the next sent rows of the selection by id, made unsent again in
-- place, so the relay sends them as it sends new events. Each keeps its id,
-- event_id, topic, key, payload, headers and created_at: consumers' inboxes
-- skip what they already applied. It takes this transaction's id as its xid,
-- as if this transaction had inserted it: the relay's claim reads rows in
-- (xid, id) order from its position per partition, so a replayed row comes
-- after every row of its key already waiting, and the rows of one chunk keep
-- their id order. attempts and the last error start over. $7: the topic to
-- send them to instead of their own (`--to-topic`), NULL for their own.
-- The rows are found through the primary key from $5 on. `through_id`, the
-- highest id the chunk looked at (NULL: none left), is the next chunk's $5,
-- so each row is read once overall, and a row retention deleted meanwhile
-- does not end the replay early. `ids` are the rows made unsent, for a replay
-- that waits until the relay sent them (outbox_replay_unsent.sql).
WITH chosen AS (
    SELECT s.id FROM {schema}.outbox s
     WHERE s.sent_at IS NOT NULL
       AND s.created_at >= $1
       AND s.created_at < $2
       AND ($3::text[] IS NULL OR s.topic = ANY($3::text[]))
       AND ($4::text IS NULL OR s.key = $4)
       AND s.id > $5
     ORDER BY s.id
     LIMIT $6
), replayed AS (
    UPDATE {schema}.outbox o
       SET sent_at = NULL,
           attempts = 0,
           last_error = NULL,
           next_attempt_at = NULL,
           replay_topic = $7,
           xid = pg_catalog.pg_current_xact_id()
     WHERE o.id IN (SELECT id FROM chosen)
       AND o.sent_at IS NOT NULL
    RETURNING o.id
)
SELECT (SELECT max(id) FROM chosen) AS through_id,
       (SELECT count(*) FROM replayed) AS replayed,
       (SELECT coalesce(array_agg(id), '{}') FROM replayed) AS ids
