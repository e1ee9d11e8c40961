-- One branch of outbox_claim_batch.sql: partition {partition}'s next
-- claimable rows, when this worker owns it.
(SELECT a.id
   FROM {schema}.outbox a
  WHERE a.sent_at IS NULL
    AND a.partition_id = {partition}
    AND {partition} = ANY($1::smallint[])
    AND (a.next_attempt_at IS NULL OR a.next_attempt_at <= now())
    AND NOT EXISTS (
         SELECT 1 FROM {schema}.outbox w
          WHERE w.sent_at IS NULL
            AND w.next_attempt_at IS NOT NULL
            AND w.next_attempt_at > now()
            AND w.key = a.key
            AND w.id < a.id)
  ORDER BY a.id
  LIMIT $2)
