-- The relay's maintenance: forget the records of relays that stopped
-- reporting 15 minutes ago (killed, or gone with their host): long enough
-- for an operator to see that one died, short enough that a replaced pod
-- does not keep a warning up.
DELETE FROM {schema}.outbox_relays WHERE expires_at < now() - interval '15 minutes'
