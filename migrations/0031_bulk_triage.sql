-- Triage of many groups at once, with an undo (issue 39 item 4).

-- An ignored group may reopen by itself: "until it happens again" (1) or "until N more
-- reports". The upload that brings the last of them reopens it as open; NULL: ignored for good
-- (or not ignored).
ALTER TABLE groups
    ADD COLUMN ignore_reports_left integer CHECK (ignore_reports_left > 0),
    ADD CONSTRAINT groups_ignore_until_only_ignored
        CHECK (ignore_reports_left IS NULL OR state = 'ignored');

-- One triage change of one or more groups (a bulk change from the list, a one-click change of a
-- row, `POST /api/v1/groups/bulk`): who made it, what it did in words ("resolved"), and whether
-- it was undone (and by whom). Each group's history has its own entries as well.
CREATE TABLE group_changes (
    id              bigserial PRIMARY KEY,
    at              timestamptz NOT NULL DEFAULT now(),
    summary         text NOT NULL,
    actor           text NOT NULL,
    actor_kind      text CHECK (actor_kind IN ('person', 'token', 'service')),
    actor_person_id bigint REFERENCES people (id) ON DELETE SET NULL,
    actor_token_id  bigint REFERENCES tokens (id) ON DELETE SET NULL,
    undone_at       timestamptz,
    undone_by       text
);

-- The groups a change changed: their triage before and after, and the newest history entry the
-- change left (an undo is refused when the group changed since: a newer entry, another triage).
-- No cascade from groups (like fixes, migration 0009): a group a change names is not deleted by
-- a reclassification.
CREATE TABLE group_change_groups (
    change_id                  bigint NOT NULL REFERENCES group_changes (id) ON DELETE CASCADE,
    group_id                   bigint NOT NULL REFERENCES groups (id),
    before_state               text NOT NULL,
    before_resolved_in         text NOT NULL,
    before_assignee            text NOT NULL,
    before_assignee_person_id  bigint REFERENCES people (id) ON DELETE SET NULL,
    before_ignore_reports_left integer,
    after_state                text NOT NULL,
    after_resolved_in          text NOT NULL,
    after_assignee             text NOT NULL,
    after_assignee_person_id   bigint REFERENCES people (id) ON DELETE SET NULL,
    after_ignore_reports_left  integer,
    last_event_id              bigint,
    PRIMARY KEY (change_id, group_id)
);
CREATE INDEX group_change_groups_group ON group_change_groups (group_id);
