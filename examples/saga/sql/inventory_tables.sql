-- The inventory service's own tables (schema {schema}). Units move between the
-- three columns of a product and never leave it: stock + reserved + sold is constant.
CREATE TABLE IF NOT EXISTS {schema}.products (
    sku      text PRIMARY KEY,
    stock    int NOT NULL CHECK (stock >= 0),
    reserved int NOT NULL DEFAULT 0 CHECK (reserved >= 0),
    sold     int NOT NULL DEFAULT 0 CHECK (sold >= 0)
);
-- One row per order that asked for stock: held until the payment settles it.
CREATE TABLE IF NOT EXISTS {schema}.reservations (
    order_id   uuid PRIMARY KEY,
    sku        text NOT NULL,
    qty        int NOT NULL,
    state      text NOT NULL CHECK (state IN ('held', 'sold', 'released', 'rejected')),
    updated_at timestamptz NOT NULL DEFAULT now()
);
