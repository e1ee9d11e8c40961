-- `--notify adaptive`: a NOTIFY at commit only for rows whose partition's relay
-- worker is waiting (see migration 0005). Constraint triggers are row-level
-- and cannot be replaced in place, hence drop + create.
DROP TRIGGER IF EXISTS outbox_notify_adaptive ON {schema}.outbox;
CREATE CONSTRAINT TRIGGER outbox_notify_adaptive
    AFTER INSERT ON {schema}.outbox
    DEFERRABLE INITIALLY DEFERRED
    FOR EACH ROW EXECUTE FUNCTION {schema}.postbox_outbox_notify_adaptive();
