SELECT version, name, checksum FROM {schema}.postbox_migrations ORDER BY version
