SELECT message_id FROM {schema}.inbox WHERE consumer = $1
