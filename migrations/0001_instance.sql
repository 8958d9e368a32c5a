-- The installation's identity: one row, created with the database, stable across restarts.
-- Its id tells apart two deployments' data (logs, metrics) and proves data survived a restart.
CREATE TABLE instance (
    singleton  boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    id         uuid NOT NULL DEFAULT gen_random_uuid(),
    created_at timestamptz NOT NULL DEFAULT now()
);
INSERT INTO instance DEFAULT VALUES;
