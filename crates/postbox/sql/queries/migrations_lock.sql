-- Serialises concurrent `postbox migrate` runs on one schema (held to COMMIT).
SELECT pg_advisory_xact_lock(hashtext('postbox.migrate'), hashtext($1))
