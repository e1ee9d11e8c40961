-- One chat as this service sees it: what it sent and what it received.
SELECT id, chat_id, body, $2::text AS sender, true AS mine, created_at,
       CASE WHEN delivered_at IS NULL THEN 'saved' ELSE 'delivered' END AS state
  FROM {schema}.messages WHERE chat_id = $1
UNION ALL
SELECT message_id, chat_id, body, sender, false, sent_at, 'received'
  FROM {schema}.received WHERE chat_id = $1
 ORDER BY created_at, id
