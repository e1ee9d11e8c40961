DROP TRIGGER IF EXISTS outbox_notify_adaptive ON {schema}.outbox
