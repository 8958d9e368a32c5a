-- Webhooks (issue 20 item 1): endpoints that admins register, an outbox of deliveries written in
-- the same transaction as the change that causes them (fanned out to the matching endpoints at
-- that moment), and one row per delivery attempt with its status code, for the delivery log.
CREATE TABLE webhook_endpoints (
    id          bigserial PRIMARY KEY,
    url         text NOT NULL,
    -- Subscribed event names (app::webhooks::EventKind spellings).
    events      text[] NOT NULL,
    -- `json` (the signed payload) or `slack` (an incoming-webhook body).
    format      text NOT NULL DEFAULT 'json',
    -- Filters; empty = every project / category. Projects match in any letter case.
    projects    text[] NOT NULL DEFAULT '{}',
    categories  text[] NOT NULL DEFAULT '{}',
    -- The HMAC-SHA256 key. Kept as written: signing needs it, so it cannot be hashed; it is
    -- shown once at creation and never returned by the API or the portal again.
    secret      text NOT NULL,
    description text NOT NULL DEFAULT '',
    enabled     boolean NOT NULL DEFAULT true,
    created_by  text NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    updated_at  timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE webhook_deliveries (
    id              bigserial PRIMARY KEY,
    endpoint_id     bigint NOT NULL REFERENCES webhook_endpoints (id) ON DELETE CASCADE,
    event           text NOT NULL,
    -- The event's facts (app::webhooks::Event); the body is rendered from them at each attempt.
    payload         jsonb NOT NULL,
    -- pending | delivered | dead
    state           text NOT NULL DEFAULT 'pending',
    attempts        integer NOT NULL DEFAULT 0,
    -- When a pending row is due; a claim pushes it forward by a lease, so a sender that dies
    -- mid-post leaves the row due again (at-least-once).
    next_attempt_at timestamptz NOT NULL DEFAULT now(),
    last_status     smallint,
    last_error      text NOT NULL DEFAULT '',
    created_at      timestamptz NOT NULL DEFAULT now(),
    delivered_at    timestamptz
);
CREATE INDEX webhook_deliveries_due ON webhook_deliveries (next_attempt_at) WHERE state = 'pending';
CREATE INDEX webhook_deliveries_endpoint ON webhook_deliveries (endpoint_id, id DESC);

CREATE TABLE webhook_attempts (
    id          bigserial PRIMARY KEY,
    delivery_id bigint NOT NULL REFERENCES webhook_deliveries (id) ON DELETE CASCADE,
    attempt     integer NOT NULL,
    -- The HTTP status, or NULL when no response came (refused, timed out, unreachable).
    status      smallint,
    error       text NOT NULL DEFAULT '',
    duration_ms integer NOT NULL,
    at          timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX webhook_attempts_delivery ON webhook_attempts (delivery_id, attempt);
