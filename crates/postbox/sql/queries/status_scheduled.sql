-- `postbox status`: scheduled events waiting to be due, and seconds until the
-- next is (NULL when none waits). Reads the due index's head and counts the
-- table.
SELECT count(*) AS scheduled,
       extract(epoch FROM min(deliver_at) - now())::float8 AS next_due_in_seconds
  FROM {schema}.outbox_scheduled
