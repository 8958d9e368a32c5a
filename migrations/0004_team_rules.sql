-- Team rules (issue 8): rules a deployment writes in the portal, with the fields of
-- src/rules/builtin.toml stored as jsonb. A row whose rule_id is a built-in id overrides that
-- rule (spec set) or disables it (enabled false; spec may be null). Every change is recorded in
-- rule_history and bumps ruleset_version, which replicas compare to reload (LISTEN/NOTIFY on
-- channel gpu_triage_rules, plus a periodic check). reclassify_runs tracks background re-runs of
-- the current rules over stored reports.
CREATE TABLE team_rules (
    rule_id    text PRIMARY KEY CHECK (length(rule_id) BETWEEN 1 AND 100),
    spec       jsonb,
    enabled    boolean NOT NULL DEFAULT true,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now(),
    updated_by text NOT NULL DEFAULT ''
);

CREATE TABLE rule_history (
    id      bigserial PRIMARY KEY,
    rule_id text NOT NULL,
    action  text NOT NULL CHECK (action IN ('create', 'update', 'delete', 'import')),
    actor   text NOT NULL,
    at      timestamptz NOT NULL DEFAULT now(),
    -- The entry before and after: {"spec": ..., "enabled": ...}; null when absent.
    old     jsonb,
    new     jsonb
);
CREATE INDEX rule_history_rule ON rule_history (rule_id, id DESC);

CREATE TABLE ruleset_version (
    singleton boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    version   bigint NOT NULL DEFAULT 0
);
INSERT INTO ruleset_version DEFAULT VALUES;

CREATE TABLE reclassify_runs (
    id              bigserial PRIMARY KEY,
    state           text NOT NULL DEFAULT 'running'
                    CHECK (state IN ('running', 'done', 'failed', 'interrupted')),
    ruleset_version bigint NOT NULL,
    total           bigint NOT NULL DEFAULT 0,
    done            bigint NOT NULL DEFAULT 0,
    changed         bigint NOT NULL DEFAULT 0,
    regrouped       bigint NOT NULL DEFAULT 0,
    started_by      text NOT NULL DEFAULT '',
    error           text NOT NULL DEFAULT '',
    started_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now(),
    finished_at     timestamptz
);

-- "Reports whose classification names rule X" (the rule page) without a full scan.
CREATE INDEX reports_findings ON reports USING gin ((classification -> 'findings') jsonb_path_ops);
