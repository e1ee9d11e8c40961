-- Adaptive wake-up (`postbox migrate --notify adaptive`): a producer's commit
-- sends NOTIFY only when the relay worker owning the row's partition is asleep
-- and waiting for one. NOTIFY serialises committing transactions on a global
-- lock, so "one per transaction" caps a busy producer; a relay that is awake
-- (draining, or polling right after activity) needs no notification.
--
-- One row per partition. A relay worker arms its partitions just before it
-- goes to sleep (then claims once more, so a row committed in between is not
-- missed) and disarms them when it wakes up and finds work.
CREATE TABLE {schema}.outbox_wakeup (
    partition_id smallint PRIMARY KEY CHECK (partition_id BETWEEN 0 AND 63),
    armed        boolean  NOT NULL DEFAULT true
) WITH (fillfactor = 50);  -- room for HOT updates of the flags

INSERT INTO {schema}.outbox_wakeup (partition_id) SELECT g FROM generate_series(0, 63) g;

-- Runs at COMMIT (deferred constraint trigger), so it reads the flag as it is
-- when the row becomes visible, not when it was inserted: a long producer
-- transaction cannot miss a worker that fell asleep in the meantime.
-- The shared advisory lock, held until this transaction has committed, closes
-- the last gap: a worker that just armed takes the same lock exclusively
-- before its final look (`outbox_wakeup_fence.sql`), so it either waits for
-- this commit to be visible or this read sees the flag set.
-- SECURITY DEFINER: producers need no rights on outbox_wakeup.
CREATE FUNCTION {schema}.postbox_outbox_notify_adaptive() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog AS $$
BEGIN
    PERFORM pg_advisory_xact_lock_shared(hashtext('postbox.wakeup.' || TG_TABLE_SCHEMA), 0);
    IF EXISTS (SELECT 1 FROM {schema}.outbox_wakeup w
                WHERE w.partition_id = NEW.partition_id AND w.armed) THEN
        PERFORM pg_notify('postbox_outbox', TG_TABLE_SCHEMA);
    END IF;
    RETURN NULL;
END;
$$;
