-- The knowledge base: API tokens and portal sessions, groups of recurring failures keyed by
-- fingerprint, reports (raw log gzip-compressed and scrubbed of secrets, classification as
-- jsonb), recorded fixes, reproduction jobs and idempotency records for uploads.
CREATE EXTENSION IF NOT EXISTS pg_trgm;

CREATE TABLE tokens (
    id           bigserial PRIMARY KEY,
    name         text NOT NULL CHECK (length(name) BETWEEN 1 AND 200),
    -- First characters of the token, shown in listings so a person can tell tokens apart.
    prefix       text NOT NULL,
    -- SHA-256 of the whole token: the token itself is never stored.
    hash         bytea NOT NULL UNIQUE,
    scopes       text[] NOT NULL CHECK (scopes <@ ARRAY['ingest','read','worker','admin'] AND cardinality(scopes) > 0),
    created_at   timestamptz NOT NULL DEFAULT now(),
    last_used_at timestamptz,
    revoked_at   timestamptz
);

CREATE TABLE sessions (
    -- SHA-256 of the cookie value.
    id_hash    bytea PRIMARY KEY,
    token_id   bigint NOT NULL REFERENCES tokens(id) ON DELETE CASCADE,
    csrf       text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    expires_at timestamptz NOT NULL
);
CREATE INDEX sessions_expires ON sessions (expires_at);

CREATE TABLE groups (
    id              bigserial PRIMARY KEY,
    fingerprint     text NOT NULL UNIQUE,
    category        text NOT NULL,
    title           text NOT NULL,
    root_cause_text text NOT NULL DEFAULT '',
    report_count    bigint NOT NULL DEFAULT 0,
    first_seen      timestamptz NOT NULL DEFAULT now(),
    last_seen       timestamptz NOT NULL DEFAULT now(),
    search          tsvector GENERATED ALWAYS AS (
        to_tsvector('simple', title || ' ' || category || ' ' || root_cause_text)) STORED
);
CREATE INDEX groups_search ON groups USING gin (search);
CREATE INDEX groups_last_seen ON groups (last_seen DESC);

CREATE TABLE reports (
    id              bigserial PRIMARY KEY,
    created_at      timestamptz NOT NULL DEFAULT now(),
    token_id        bigint REFERENCES tokens(id) ON DELETE SET NULL,
    project         text NOT NULL DEFAULT '',
    job_url         text NOT NULL DEFAULT '',
    commit_sha      text NOT NULL DEFAULT '',
    branch          text NOT NULL DEFAULT '',
    environment     text NOT NULL DEFAULT '',
    filename        text NOT NULL DEFAULT '',
    group_id        bigint NOT NULL REFERENCES groups(id),
    category        text NOT NULL,
    title           text NOT NULL,
    confidence      text NOT NULL,
    root_cause_line integer,
    root_cause_text text NOT NULL DEFAULT '',
    fingerprint     text NOT NULL,
    async_hint      boolean NOT NULL DEFAULT false,
    classification  jsonb NOT NULL,
    -- SHA-256 of the uploaded bytes: identical uploads for one project are one report.
    log_sha256      bytea NOT NULL,
    log_bytes       bigint NOT NULL,
    log_lines       bigint NOT NULL,
    -- The log as uploaded, secrets scrubbed, gzip-compressed.
    log_gz          bytea NOT NULL,
    script          text,
    -- Text the search index covers: title, root cause, findings, project, metadata.
    search_text     text NOT NULL DEFAULT '',
    search          tsvector GENERATED ALWAYS AS (to_tsvector('simple', search_text)) STORED,
    UNIQUE (project, log_sha256)
);
CREATE INDEX reports_search ON reports USING gin (search);
CREATE INDEX reports_search_trgm ON reports USING gin (search_text gin_trgm_ops);
CREATE INDEX reports_group ON reports (group_id, created_at DESC);
CREATE INDEX reports_created ON reports (created_at DESC);
CREATE INDEX reports_category ON reports (category, created_at DESC);

CREATE TABLE fixes (
    id         bigserial PRIMARY KEY,
    group_id   bigint NOT NULL REFERENCES groups(id) ON DELETE CASCADE,
    summary    text NOT NULL CHECK (length(summary) BETWEEN 1 AND 500),
    details    text NOT NULL DEFAULT '',
    link       text NOT NULL DEFAULT '',
    author     text NOT NULL DEFAULT '',
    created_at timestamptz NOT NULL DEFAULT now(),
    search     tsvector GENERATED ALWAYS AS (to_tsvector('simple', summary || ' ' || details)) STORED
);
CREATE INDEX fixes_group ON fixes (group_id, created_at DESC);
CREATE INDEX fixes_search ON fixes USING gin (search);

-- Reproduction jobs: a report with a script queues one; GPU workers claim them (issue: worker).
CREATE TABLE jobs (
    id               bigserial PRIMARY KEY,
    report_id        bigint NOT NULL REFERENCES reports(id) ON DELETE CASCADE,
    state            text NOT NULL DEFAULT 'queued' CHECK (state IN ('queued','running','done','dead')),
    attempts         integer NOT NULL DEFAULT 0,
    max_attempts     integer NOT NULL DEFAULT 3,
    lease_token      uuid,
    lease_expires_at timestamptz,
    worker           text NOT NULL DEFAULT '',
    last_error       text NOT NULL DEFAULT '',
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX jobs_queued ON jobs (created_at) WHERE state = 'queued';
CREATE INDEX jobs_report ON jobs (report_id);

-- Idempotency-Key records: a retry of an upload returns the first response.
CREATE TABLE idempotency_keys (
    token_id       bigint NOT NULL REFERENCES tokens(id) ON DELETE CASCADE,
    key            text NOT NULL,
    request_sha256 bytea NOT NULL,
    status         smallint NOT NULL,
    response       jsonb NOT NULL,
    created_at     timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (token_id, key)
);
