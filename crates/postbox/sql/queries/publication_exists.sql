-- Whether the schema's outbox is published for `--notify logical` (the relay
-- asks at start; pg_publication_tables is readable by every role).
SELECT EXISTS (
    SELECT 1 FROM pg_catalog.pg_publication_tables
     WHERE pubname = '{publication}' AND schemaname = $1 AND tablename = 'outbox'
)
