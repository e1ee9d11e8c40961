CREATE TABLE IF NOT EXISTS {schema}.postbox_migrations (
    version    int         PRIMARY KEY,
    name       text        NOT NULL,
    checksum   text        NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
)
