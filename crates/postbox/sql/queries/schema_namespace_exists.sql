-- Whether the schema exists (so a role without CREATE on the database can
-- migrate a schema an admin created for it).
SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)
