-- `postbox status`: the consumer side's dead letters per consumer, and how
-- many of them an operator asked to replay that no consumer has taken yet.
SELECT consumer,
       count(*) AS dead_letters,
       count(*) FILTER (WHERE replay_at IS NOT NULL) AS replay_waiting
  FROM {schema}.inbox_dead_letter
 GROUP BY consumer
 ORDER BY consumer
