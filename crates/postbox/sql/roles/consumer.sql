-- A consumer: records received messages in the inbox, in the transaction of
-- its own effect.
GRANT USAGE ON SCHEMA {schema} TO {role};
GRANT SELECT, INSERT ON {schema}.inbox TO {role};
