-- Move up to $1 due scheduled events into the outbox, in (deliver_at, id)
-- order, in the mover's transaction (with outbox_scheduled_lock.sql). They
-- take outbox ids in that order and this transaction's xid, so the relay's
-- claim sends them in it, after what their keys already have waiting. Each
-- keeps its event id, topic, key, payload and headers; its created_at
-- becomes its deliver_at, the moment it was due, so lag and latency figures
-- count from then. The outbox trigger's NOTIFY wakes the relays at commit.
WITH due AS (
    DELETE FROM {schema}.outbox_scheduled s
     WHERE s.id = ANY(ARRAY(
           SELECT id FROM {schema}.outbox_scheduled
            WHERE deliver_at <= now()
            ORDER BY deliver_at, id
            LIMIT $1))
    RETURNING s.id, s.event_id, s.topic, s.event, s.key, s.payload, s.headers, s.deliver_at
), moved AS (
    INSERT INTO {schema}.outbox (event_id, topic, event, key, payload, headers, created_at)
    SELECT event_id, topic, event, key, payload, headers, deliver_at
      FROM due
     ORDER BY deliver_at, id
    RETURNING 1
)
SELECT count(*) FROM moved
