-- The head of outbox_claim_batch.sql when sent rows are marked (the default):
-- the row stays, sent, for outbox_retention.
UPDATE {schema}.outbox o SET sent_at = now(), next_attempt_at = NULL
