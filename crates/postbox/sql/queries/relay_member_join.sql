-- Each relay worker session announces itself with an advisory lock keyed by
-- its backend pid; counting those locks tells every worker how many share the
-- partitions, with nothing to clean up when a worker dies. The pid comes
-- back too: a session of its own keeps it (postbox-relay's session_check.rs).
SELECT pg_try_advisory_lock(hashtext('postbox.member.' || $1), pg_backend_pid()),
       pg_backend_pid()
