UPDATE {schema}.outbox SET sent_at = now(), next_attempt_at = NULL WHERE id = ANY($1::bigint[])
