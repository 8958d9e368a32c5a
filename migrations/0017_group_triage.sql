-- Triage of groups (issue 18 item 4): a state people set (open, resolved, optionally "in" a
-- commit or version, ignored) or the upload path sets (regressed: a resolved failure came back
-- in a build that should contain the fix), an assignee (a token name, '' for nobody), and the
-- activity history of those changes. Reports carry the version of the build they come from, so
-- "resolved in 2.0" can be told apart from a report of 1.9.
ALTER TABLE groups
    ADD COLUMN state text NOT NULL DEFAULT 'open'
        CHECK (state IN ('open', 'resolved', 'ignored', 'regressed')),
    -- The commit or version a resolution names ('' when it names none); kept on regression so
    -- the page can say which fix failed.
    ADD COLUMN resolved_in text NOT NULL DEFAULT '',
    ADD COLUMN state_changed_at timestamptz NOT NULL DEFAULT now(),
    ADD COLUMN assignee text NOT NULL DEFAULT '',
    ADD CONSTRAINT groups_resolved_in_when_resolved
        CHECK (resolved_in = '' OR state IN ('resolved', 'regressed'));

ALTER TABLE reports ADD COLUMN version text NOT NULL DEFAULT '';

-- Who changed what, when: one row per change. Rows reference their group without a cascade
-- (like fixes, migration 0009): reclassification deletes a group only when nothing refers to
-- it, so a group someone triaged keeps its history.
CREATE TABLE group_events (
    id         bigserial PRIMARY KEY,
    group_id   bigint NOT NULL REFERENCES groups (id),
    at         timestamptz NOT NULL DEFAULT now(),
    -- A token name, or 'gpu-triage' for changes the service makes on upload.
    actor      text NOT NULL,
    action     text NOT NULL CHECK (action IN ('state', 'assignee', 'older_build')),
    from_value text NOT NULL DEFAULT '',
    to_value   text NOT NULL DEFAULT '',
    detail     text NOT NULL DEFAULT '',
    -- The upload that caused an automatic change.
    report_id  bigint REFERENCES reports (id) ON DELETE SET NULL
);
CREATE INDEX group_events_group ON group_events (group_id, at DESC, id DESC);

-- The group list's filters: by state and assignee on the group row, by project through the
-- group's reports (letter case ignored), by fix through fixes_group.
CREATE INDEX groups_state ON groups (state, last_seen DESC, id DESC);
CREATE INDEX groups_assignee ON groups (assignee) WHERE assignee <> '';
CREATE INDEX groups_category ON groups (category);
CREATE INDEX reports_project_group ON reports (lower(project), group_id);
-- The commit rule of regressions: when a project first saw a commit (walked oldest first).
CREATE INDEX reports_project_commit ON reports (project, created_at) WHERE commit_sha <> '';
