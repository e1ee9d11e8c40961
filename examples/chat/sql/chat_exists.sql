SELECT EXISTS (SELECT 1 FROM {schema}.chats WHERE id = $1)
