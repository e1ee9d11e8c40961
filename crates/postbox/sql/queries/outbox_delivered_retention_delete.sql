-- The relay's maintenance: forget delivered counts older than a day.
DELETE FROM {schema}.outbox_delivered WHERE minute < now() - interval '1 day'
