DROP TRIGGER IF EXISTS outbox_notify ON {schema}.outbox
