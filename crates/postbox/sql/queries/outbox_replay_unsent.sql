-- How many of a replay's last chunk ($1, its ids) the relay has yet to send:
-- the unsent ones that may go now. A row waiting out a retry backoff does not
-- hold the replay back; a row behind a held row of its key does, until the
-- replay gives up waiting (see `postbox replay --rate auto`). A primary-key
-- lookup of at most one chunk's rows.
SELECT count(*) FROM {schema}.outbox
 WHERE id = ANY($1::bigint[])
   AND sent_at IS NULL
   AND (next_attempt_at IS NULL OR next_attempt_at <= now())
