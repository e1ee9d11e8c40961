SELECT coalesce(max(version), 0) FROM {schema}.postbox_migrations
