-- The orders service's own table (schema {schema}); its outbox and inbox come from postbox migrate.
CREATE TABLE IF NOT EXISTS {schema}.orders (
    id            uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    sku           text NOT NULL,
    qty           int NOT NULL CHECK (qty > 0),
    amount_cents  bigint NOT NULL CHECK (amount_cents >= 0),
    card          text NOT NULL,
    status        text NOT NULL DEFAULT 'PENDING' CHECK (status IN ('PENDING', 'CONFIRMED', 'CANCELLED')),
    cancel_reason text,
    created_at    timestamptz NOT NULL DEFAULT now(),
    updated_at    timestamptz NOT NULL DEFAULT now()
);
