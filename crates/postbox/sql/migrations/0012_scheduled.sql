-- Scheduled events (`Event::deliver_at`, Node `deliverAt`, or a plain INSERT
-- here): an event to deliver at or after `deliver_at` waits in this table, not
-- in the outbox, so a million of them cost the relay's claim nothing: its
-- indexes never hold them. When one is due, the relay moves it into the
-- outbox (outbox_scheduled_move.sql), where it is delivered like any new
-- event, in its key's order from that moment: a scheduled event does not
-- hold back the later events of its key. Cancelling one before it is due
-- deletes it from here (outbox_scheduled_cancel.sql).
CREATE TABLE {schema}.outbox_scheduled (
    id          bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    event_id    uuid        NOT NULL DEFAULT gen_random_uuid() UNIQUE,
    topic       {schema}.postbox_topic NOT NULL,
    event       {schema}.postbox_event_type NOT NULL,
    key         text,
    payload     jsonb       NOT NULL,
    headers     {schema}.postbox_headers NOT NULL DEFAULT '{}',
    created_at  timestamptz NOT NULL DEFAULT now(),
    deliver_at  timestamptz NOT NULL
);

-- The mover reads the due ones in order, from the head.
CREATE INDEX outbox_scheduled_due ON {schema}.outbox_scheduled (deliver_at, id);
