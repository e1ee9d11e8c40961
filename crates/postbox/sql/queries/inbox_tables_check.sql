-- A consumer's start (`InboxConsumer::check`, the Node wrappers): the inbox
-- and its dead letters exist, with every column a consumer writes, and the
-- role may read them. Reads no row. An unmigrated schema fails with 42P01 or
-- 3F000, an outdated one with 42703, a role without `postbox grant --as
-- consumer` with 42501.
SELECT (SELECT count(*) FROM (SELECT consumer, message_id FROM {schema}.inbox LIMIT 0) AS i)
     + (SELECT count(*) FROM (SELECT id, consumer, message_id, topic, name, key, payload, headers,
                                     source, attempts, last_error, first_failed_at, dead_at, replay_at
                                FROM {schema}.inbox_dead_letter LIMIT 0) AS d)
