-- The head of outbox_claim_batch.sql when sent = "delete": a delivered row
-- leaves the outbox in the claim's transaction (see outbox_delete_sent.sql).
DELETE FROM {schema}.outbox o
