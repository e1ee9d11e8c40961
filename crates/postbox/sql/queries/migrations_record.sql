INSERT INTO {schema}.postbox_migrations (version, name, checksum) VALUES ($1, $2, $3)
