-- The order and a plain second row of the outbox row's size.
\set customer random(1, 1000)
BEGIN;
INSERT INTO pgb.orders (customer, amount) VALUES (:customer, 19.99) RETURNING id;
INSERT INTO pgb.plain (topic, event, key, payload, headers)
VALUES ('orders', 'order.created', 'customer:' || :customer,
        ('{"id": 1, "customer": ' || :customer || ', "amount": "19.99"}')::jsonb, '{}'::jsonb);
COMMIT;
