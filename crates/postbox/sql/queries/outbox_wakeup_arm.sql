-- A relay worker is about to sleep: producers committing rows of these
-- partitions must NOTIFY (adaptive wake-up). Touches only flags that change.
UPDATE {schema}.outbox_wakeup SET armed = true
 WHERE partition_id = ANY($1::smallint[]) AND NOT armed
