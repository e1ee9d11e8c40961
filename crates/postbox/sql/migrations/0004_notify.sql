-- Wake-up for the relay: one NOTIFY per producer *statement* (and, because
-- PostgreSQL folds identical notifications, at most one per transaction).
-- Statement-level, so it also wakes the relay for plain-SQL producers; on
-- INSERT only, so the relay's own UPDATE/DELETE never wake it. Delivered at
-- COMMIT, dropped on ROLLBACK. `postbox migrate --notify off` drops the trigger.
CREATE FUNCTION {schema}.postbox_outbox_notify() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('postbox_outbox', TG_TABLE_SCHEMA);
    RETURN NULL;
END;
$$;

CREATE TRIGGER outbox_notify
    AFTER INSERT ON {schema}.outbox
    FOR EACH STATEMENT EXECUTE FUNCTION {schema}.postbox_outbox_notify();
