-- The database role this session acts as: `postbox dlq` and
-- `postbox inbox-dlq` name it in the audit row of a replay or purge.
SELECT current_user::text
