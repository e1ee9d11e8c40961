-- A consumer takes the oldest of its dead letters an operator asked to replay,
-- locked for the transaction that runs its effect (other instances of the
-- consumer skip it). $1 consumer.
SELECT id, message_id, topic, name, key, payload, headers, source, attempts
  FROM {schema}.inbox_dead_letter
 WHERE consumer = $1 AND replay_at IS NOT NULL
 ORDER BY id
 LIMIT 1
   FOR UPDATE SKIP LOCKED
