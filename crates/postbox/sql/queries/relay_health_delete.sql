-- A relay stopping cleanly takes its health record away ($1: its instance).
DELETE FROM {schema}.outbox_relays WHERE instance = $1
