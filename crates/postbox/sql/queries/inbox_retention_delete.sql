-- Retention: forget inbox rows older than $1 seconds (longer than any broker
-- redelivery window), at most $2 per call.
DELETE FROM {schema}.inbox
 WHERE (consumer, message_id) IN (
       SELECT consumer, message_id FROM {schema}.inbox
        WHERE received_at < now() - make_interval(secs => $1::float8)
        ORDER BY received_at
        LIMIT $2)
