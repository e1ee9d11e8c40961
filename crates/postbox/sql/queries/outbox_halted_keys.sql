-- The console's halted keys: per key, its first unsent row that waits out a
-- retry backoff (next_attempt_at in the future) or is blocked
-- (next_attempt_at = 'infinity', `block_topics`): the key's later rows wait
-- behind it. Reads the outbox_waiting index (key, id), which holds waiting
-- rows only. $1 the most keys returned.
SELECT DISTINCT ON (o.key)
       o.id, o.event_id, o.topic, o.key, o.attempts, o.last_error,
       o.next_attempt_at = 'infinity' AS blocked,
       CASE WHEN o.next_attempt_at < 'infinity' THEN o.next_attempt_at END AS next_attempt_at,
       o.created_at
  FROM {schema}.outbox o
 WHERE o.sent_at IS NULL
   AND o.next_attempt_at IS NOT NULL
 ORDER BY o.key, o.id
 LIMIT $1
