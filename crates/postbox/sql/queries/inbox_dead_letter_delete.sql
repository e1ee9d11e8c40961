-- A replayed message's effect commits (or the inbox already had it): the dead
-- letter goes in the same transaction. $1 id.
DELETE FROM {schema}.inbox_dead_letter WHERE id = $1
