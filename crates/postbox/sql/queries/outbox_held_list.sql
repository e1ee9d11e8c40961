-- Rows of these partitions ($1) waiting out a retry backoff or blocked, and
-- how long until each may go again (NULL: blocked until an operator acts).
-- A claim passes them and the later rows of their keys; the worker moves its
-- position back to such a row once it may go, or once it is no longer
-- waiting (sent, dead-lettered, or set free by an operator). Reads
-- outbox_waiting, which holds waiting rows only.
SELECT partition_id,
       xid::text::bigint AS xid,
       id,
       CASE WHEN next_attempt_at < 'infinity'
            THEN extract(epoch FROM next_attempt_at - now())::float8
       END AS due_in_seconds
  FROM {schema}.outbox
 WHERE sent_at IS NULL
   AND next_attempt_at IS NOT NULL
   AND partition_id = ANY($1::smallint[])
