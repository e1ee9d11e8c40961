-- A relay worker is awake and working these partitions: producers may skip
-- the NOTIFY (adaptive wake-up).
UPDATE {schema}.outbox_wakeup SET armed = false
 WHERE partition_id = ANY($1::smallint[]) AND armed
