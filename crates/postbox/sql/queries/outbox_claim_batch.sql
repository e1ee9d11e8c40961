-- Claim the next batch of the partitions this relay worker owns, in id order.
-- FOR UPDATE (not SKIP LOCKED): order per key matters more than parallel
-- claims, and the advisory lock on each partition already keeps other relays
-- away. Rows waiting out a retry backoff hold back later rows of their key.
-- No high-water mark: a row whose transaction commits late (lower id than
-- rows already sent) is still found here on the next scan.
SELECT o.id, o.event_id, o.topic, o.event, o.key, o.payload, o.headers, o.attempts, o.created_at
  FROM {schema}.outbox o
 WHERE o.sent_at IS NULL
   AND o.partition_id = ANY($1::smallint[])
   AND (o.next_attempt_at IS NULL OR o.next_attempt_at <= now())
   AND NOT EXISTS (
        SELECT 1 FROM {schema}.outbox w
         WHERE w.sent_at IS NULL
           AND w.next_attempt_at IS NOT NULL
           AND w.next_attempt_at > now()
           AND w.key = o.key
           AND w.id < o.id)
 ORDER BY o.id
 LIMIT $2
 FOR UPDATE OF o
