SELECT id, title FROM {schema}.chats ORDER BY id
