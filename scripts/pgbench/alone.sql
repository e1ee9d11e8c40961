-- The business transaction alone: one order.
\set customer random(1, 1000)
BEGIN;
INSERT INTO pgb.orders (customer, amount) VALUES (:customer, 19.99) RETURNING id;
COMMIT;
