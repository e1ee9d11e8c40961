-- Each relay's health, where every other relay and every operator tool reads
-- it: one row per relay process serving this schema, written every
-- `health_interval` by the relay itself (relay_health_record.sql) and deleted
-- when it stops cleanly. Relays read the others' rows to decide who takes
-- partitions: a relay that cannot publish gives its partitions to one that
-- can, and one whose broker answers again takes its share back (docs:
-- operations/several-relays.md). A row past `expires_at` is stale: its relay
-- was killed, or cannot reach PostgreSQL; the relays' maintenance deletes it
-- 15 minutes later.
CREATE TABLE {schema}.outbox_relays (
    -- `postbox-relay:<pid>:<id>`, the prefix of its sessions' application_name.
    instance           text        PRIMARY KEY,
    version            text        NOT NULL,
    -- The host it runs on (a pod's name in Kubernetes).
    host               text        NOT NULL,
    started_at         timestamptz NOT NULL,
    reported_at        timestamptz NOT NULL,
    expires_at         timestamptz NOT NULL,
    -- false: it stands by, owning nothing, while relays that can publish serve.
    taking_partitions  boolean     NOT NULL,
    owned_partitions   integer     NOT NULL,
    -- The start of the longest outage among its sinks; null while every sink
    -- publishes.
    unavailable_since  timestamptz,
    last_publish_at    timestamptz,
    -- When every sink was last seen working (an acknowledged publish or an
    -- answered check): the oldest of the sinks' latest. A relay in an outage
    -- gives its partitions only to relays confirmed after the outage began.
    confirmed_at       timestamptz,
    -- Events it sent in its last `interval_ms`.
    sent_last_interval bigint      NOT NULL,
    interval_ms        integer     NOT NULL,
    -- One object per sink: {"sink", "state": "publishing" | "unavailable",
    -- "since", "error", "last_publish_at"}.
    sinks              jsonb       NOT NULL
);
