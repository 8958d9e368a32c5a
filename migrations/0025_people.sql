-- People who sign in through the team's OpenID provider (issue 31): one row per (issuer,
-- subject), the identity the provider vouches for, with the role their groups mapped to at
-- their last sign-in. A portal session belongs either to a token (token sign-in) or to a
-- person. A disabled person has no sessions and cannot sign in again until enabled.
CREATE TABLE people (
    id              bigserial PRIMARY KEY,
    issuer          text NOT NULL,
    subject         text NOT NULL,
    email           text NOT NULL DEFAULT '',
    name            text NOT NULL,
    role            text NOT NULL CHECK (role IN ('admin', 'member', 'viewer')),
    disabled_at     timestamptz,
    created_at      timestamptz NOT NULL DEFAULT now(),
    last_sign_in_at timestamptz NOT NULL DEFAULT now(),
    UNIQUE (issuer, subject)
);

ALTER TABLE sessions ALTER COLUMN token_id DROP NOT NULL;
ALTER TABLE sessions ADD COLUMN person_id bigint REFERENCES people(id) ON DELETE CASCADE;
ALTER TABLE sessions ADD CONSTRAINT sessions_one_holder
    CHECK ((token_id IS NULL) <> (person_id IS NULL));
CREATE INDEX sessions_person ON sessions (person_id);

-- A sign-in under way: the browser holds a cookie naming the row (its SHA-256 here); the row
-- holds what the callback must check (state, nonce) and present (the PKCE verifier). Taken
-- (deleted) by the callback, so each can finish once.
CREATE TABLE oidc_logins (
    id_hash       bytea PRIMARY KEY,
    state         text NOT NULL,
    nonce         text NOT NULL,
    pkce_verifier text NOT NULL,
    next_path     text,
    expires_at    timestamptz NOT NULL
);
CREATE INDEX oidc_logins_expires ON oidc_logins (expires_at);
