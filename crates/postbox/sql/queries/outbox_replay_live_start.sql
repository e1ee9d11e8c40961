-- The highest id in the outbox when a `postbox replay --rate auto` begins:
-- the rows above it are the live events it watches
-- (outbox_replay_live_waits.sql). A primary-key lookup.
SELECT coalesce(max(id), 0) FROM {schema}.outbox
