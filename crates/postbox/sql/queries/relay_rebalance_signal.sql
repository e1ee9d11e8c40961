-- Tell every relay worker of a schema, in every relay, to rebalance now: sent
-- after a worker joins, releases partitions or leaves, so the partitions change
-- hands in milliseconds instead of at the next `rebalance_interval` tick.
-- $1 is the channel the relays LISTEN on, $2 the payload naming the schema.
-- Outside a transaction, so it is delivered at once.
SELECT pg_notify($1, $2)
