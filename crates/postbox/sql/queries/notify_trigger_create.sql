CREATE OR REPLACE TRIGGER outbox_notify
    AFTER INSERT ON {schema}.outbox
    FOR EACH STATEMENT EXECUTE FUNCTION {schema}.postbox_outbox_notify()
