-- Adaptive wake-up without a table read per row. The trigger of 0005 ran a
-- query on outbox_wakeup for every row at every producer's commit, as a
-- SECURITY DEFINER function with its own search_path: about 71,000 CPU
-- instructions per transaction, more than the outbox row itself
-- (scripts/pgbench/instructions.sh, variant outbox_adaptive).
--
-- A sleeping relay worker now holds, for each partition it owns, a
-- session-level advisory lock: (hashtext('postbox.armed.' || schema),
-- partition). At commit the trigger asks for the same lock in shared mode
-- without waiting:
--   * refused: the worker sleeps (or is about to), so NOTIFY;
--   * granted: held until this commit is visible. A worker trying to arm
--     meanwhile is refused in turn and looks again shortly, finding this row;
--     one that armed before looks once more after: the lock is the fence too.
-- Nothing to read, no rights on any table: the function runs as the producer.
-- A worker whose session ends drops its locks with it.
--
-- outbox_wakeup is no longer read; relays from before 0009 still write it.
CREATE OR REPLACE FUNCTION {schema}.postbox_outbox_notify_adaptive() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF NOT pg_catalog.pg_try_advisory_xact_lock_shared(
            pg_catalog.hashtext('postbox.armed.' OPERATOR(pg_catalog.||) TG_TABLE_SCHEMA),
            NEW.partition_id) THEN
        PERFORM pg_catalog.pg_notify('postbox_outbox', TG_TABLE_SCHEMA);
    END IF;
    RETURN NULL;
END;
$$;
