-- The payments service's own table (schema {schema}).
CREATE TABLE IF NOT EXISTS {schema}.charges (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    order_id     uuid NOT NULL,
    amount_cents bigint NOT NULL,
    status       text NOT NULL CHECK (status IN ('completed', 'failed')),
    reason       text,
    created_at   timestamptz NOT NULL DEFAULT now(),
    -- The payment provider's idempotency key: one charge attempt per order,
    -- whatever redelivers the request (defence in depth behind the inbox).
    CONSTRAINT charges_one_per_order UNIQUE (order_id)
);
