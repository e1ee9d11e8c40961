-- How long the live events written since the last look waited, for
-- `postbox replay --rate auto`, which compares their waits while one of its
-- chunks is in flight with their waits while none is (see
-- crates/postbox-cli/src/replay/pace.rs). $1: the highest id the last look
-- saw (outbox_replay_live_start.sql before the first); $2: the ids of the
-- chunk in flight, which are not live events (a replayed row keeps its id,
-- below every live one anyway). A live event's wait is commit → claim
-- (created_at → sent_at), or so far for one the relay has yet to claim.
-- `through` is the next look's $1. A primary-key range scan of the rows
-- written since the last look.
SELECT (extract(epoch FROM max(coalesce(o.sent_at, now()) - o.created_at)) * 1e6)::int8 AS longest_us,
       coalesce(max(o.id), $1) AS through
  FROM {schema}.outbox o
 WHERE o.id > $1
   AND NOT (o.id = ANY($2::bigint[]))
