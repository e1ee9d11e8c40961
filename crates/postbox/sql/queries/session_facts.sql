-- What the relay needs to know of a session before it uses it
-- (postbox-relay's session_check.rs): its backend, which a session of its
-- own keeps and shares with no other (a pooler in transaction mode does
-- neither), and whether the server takes writes. Sent by the simple
-- protocol: no prepared statement, so it passes any pooler.
SELECT pg_backend_pid(),
       pg_is_in_recovery(),
       current_setting('default_transaction_read_only') = 'on'
