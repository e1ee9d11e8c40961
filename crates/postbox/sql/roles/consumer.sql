-- A consumer: records received messages in the inbox, in the transaction of
-- its own effect.
GRANT USAGE ON SCHEMA {schema} TO {role};
GRANT SELECT, INSERT ON {schema}.inbox TO {role};
-- Dead letters: a consumer records a message its handler gave up on, and takes
-- (then deletes) the ones an operator asked to replay.
GRANT SELECT, INSERT, UPDATE, DELETE ON {schema}.inbox_dead_letter TO {role};
