-- Retention (issue 20 item 4): raw logs and whole reports are deleted after a number of days,
-- set per project (here) or for the instance (`serve` flags), by a background pass in small
-- batches. What must outlive a deleted report is kept beside it, written in the same transaction
-- as the delete: how many reports each group had, per project and UTC day (group counts,
-- last-seen times, project filters and trend charts read it with the remaining reports), and
-- when each project first saw each commit (the regression rule reads it, migration 0017).

-- Per-project overrides. NULL: the instance default; 0: keep forever.
CREATE TABLE project_retention (
    -- lower(project): a setting matches the project in any letter case, as filters do.
    project     text PRIMARY KEY CHECK (project = lower(project) AND length(project) BETWEEN 1 AND 200),
    log_days    integer CHECK (log_days BETWEEN 0 AND 36500),
    report_days integer CHECK (report_days BETWEEN 0 AND 36500),
    updated_by  text NOT NULL DEFAULT '',
    updated_at  timestamptz NOT NULL DEFAULT now()
);

-- A report whose raw log retention removed keeps its row and classification; these say when and
-- after how many days (the report page shows it).
ALTER TABLE reports
    ADD COLUMN log_removed_at timestamptz,
    ADD COLUMN log_removed_after_days integer;

-- The pass finds what is due per project, oldest first, from an index: whole reports by upload
-- time, logs among the reports that still have one (a log removed leaves this smaller index).
CREATE INDEX reports_project_created ON reports (lower(project), created_at, id);
CREATE INDEX reports_project_log_kept ON reports (lower(project), created_at, id)
    WHERE log_removed_at IS NULL;

-- Reports retention deleted, counted per group, project (as uploaded) and UTC day of upload.
-- No cascade from groups (like fixes, migration 0009): reclassification deletes only a group
-- that nothing refers to, so a group keeps its history.
CREATE TABLE group_expired_reports (
    group_id  bigint NOT NULL REFERENCES groups (id),
    project   text   NOT NULL,
    day       date   NOT NULL,
    reports   bigint NOT NULL CHECK (reports > 0),
    -- The newest deleted report's upload time.
    last_seen timestamptz NOT NULL,
    PRIMARY KEY (group_id, day, project)
);
CREATE INDEX group_expired_reports_project ON group_expired_reports (lower(project), group_id);

-- When a project first saw a commit (lowercase, trimmed), kept for the commits of deleted
-- reports.
CREATE TABLE expired_commits (
    project    text NOT NULL,
    commit_sha text NOT NULL,
    first_seen timestamptz NOT NULL,
    PRIMARY KEY (project, commit_sha)
);

-- An upload retry's answer names its report: the key goes with the report.
CREATE INDEX idempotency_keys_report ON idempotency_keys (((response ->> 'report_id')::bigint));

-- Each pass (any replica): when it ran and what it removed.
CREATE TABLE retention_runs (
    id              bigserial PRIMARY KEY,
    started_at      timestamptz NOT NULL DEFAULT now(),
    finished_at     timestamptz,
    logs_removed    bigint NOT NULL DEFAULT 0,
    reports_removed bigint NOT NULL DEFAULT 0,
    -- Compressed log bytes deleted (chunks of removed logs and of deleted reports).
    bytes_removed   bigint NOT NULL DEFAULT 0,
    error           text NOT NULL DEFAULT ''
);
CREATE INDEX retention_runs_started ON retention_runs (started_at DESC);

-- What retention removed per project (lower(project); '' for reports without one), in all.
CREATE TABLE retention_removed (
    project         text PRIMARY KEY,
    logs_removed    bigint NOT NULL DEFAULT 0,
    reports_removed bigint NOT NULL DEFAULT 0,
    bytes_removed   bigint NOT NULL DEFAULT 0,
    last_removed_at timestamptz NOT NULL DEFAULT now()
);
