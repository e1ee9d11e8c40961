-- As outbox.sql.in, with a time-ordered event id (UUIDv7's layout: 48 bits of
-- milliseconds, then random), as a client could send: the unique index then
-- grows at its right edge instead of at random pages.
\set customer random(1, 1000)
BEGIN;
INSERT INTO pgb.orders (customer, amount) VALUES (:customer, 19.99) RETURNING id;
INSERT INTO pgb.outbox (event_id, topic, event, key, payload, headers)
VALUES ((lpad(to_hex((extract(epoch FROM clock_timestamp()) * 1000)::bigint), 12, '0')
         || '7' || substr(md5(random()::text), 1, 19))::uuid,
        'orders', 'order.created', 'customer:' || :customer,
        ('{"id": 1, "customer": ' || :customer || ', "amount": "19.99"}')::jsonb, '{}'::jsonb)
RETURNING id, event_id;
COMMIT;
