SELECT count(*) FROM {schema}.outbox_dead_letter
