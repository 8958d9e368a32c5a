-- Actions name their person (issue 31 item 3). Every record of who did something keeps the
-- name it had then (history reads right when a person is deleted or renamed) and gains the
-- kind of actor ('person', 'token' or 'service') and the person's or token's id. Rows written
-- before this migration keep their names and have no kind: the name is all that is known of
-- them, and they are shown as stored.

-- Fixes: who recorded them ("recorded by me" follows the person, or the token).
ALTER TABLE fixes
    ADD COLUMN author_kind text CHECK (author_kind IN ('person', 'token', 'service')),
    ADD COLUMN author_person_id bigint REFERENCES people (id) ON DELETE SET NULL,
    ADD COLUMN author_token_id bigint REFERENCES tokens (id) ON DELETE SET NULL,
    ADD CONSTRAINT fixes_author_person_is_a_person
        CHECK (author_person_id IS NULL OR author_kind = 'person'),
    ADD CONSTRAINT fixes_author_token_is_a_token
        CHECK (author_token_id IS NULL OR author_kind = 'token');
CREATE INDEX fixes_author_person ON fixes (author_person_id) WHERE author_person_id IS NOT NULL;
CREATE INDEX fixes_author_token ON fixes (author_token_id) WHERE author_token_id IS NOT NULL;

-- A group's history (state, assignee, older builds, merges): who made each change.
ALTER TABLE group_events
    ADD COLUMN actor_kind text CHECK (actor_kind IN ('person', 'token', 'service')),
    ADD COLUMN actor_person_id bigint REFERENCES people (id) ON DELETE SET NULL,
    ADD COLUMN actor_token_id bigint REFERENCES tokens (id) ON DELETE SET NULL,
    ADD CONSTRAINT group_events_actor_person_is_a_person
        CHECK (actor_person_id IS NULL OR actor_kind = 'person'),
    ADD CONSTRAINT group_events_actor_token_is_a_token
        CHECK (actor_token_id IS NULL OR actor_kind = 'token');

-- Assignees are people where people sign in: the person beside the name shown (the name alone,
-- a token's, where they do not).
ALTER TABLE groups
    ADD COLUMN assignee_person_id bigint REFERENCES people (id) ON DELETE SET NULL;
CREATE INDEX groups_assignee_person ON groups (assignee_person_id)
    WHERE assignee_person_id IS NOT NULL;

-- Team-rule edits (create, edit, disable, enable, delete, import).
ALTER TABLE rule_history
    ADD COLUMN actor_kind text CHECK (actor_kind IN ('person', 'token', 'service')),
    ADD COLUMN actor_person_id bigint REFERENCES people (id) ON DELETE SET NULL,
    ADD COLUMN actor_token_id bigint REFERENCES tokens (id) ON DELETE SET NULL,
    ADD CONSTRAINT rule_history_actor_person_is_a_person
        CHECK (actor_person_id IS NULL OR actor_kind = 'person'),
    ADD CONSTRAINT rule_history_actor_token_is_a_token
        CHECK (actor_token_id IS NULL OR actor_kind = 'token');

-- Reclassification runs: who started them.
ALTER TABLE reclassify_runs
    ADD COLUMN started_by_kind text CHECK (started_by_kind IN ('person', 'token', 'service')),
    ADD COLUMN started_by_person_id bigint REFERENCES people (id) ON DELETE SET NULL,
    ADD COLUMN started_by_token_id bigint REFERENCES tokens (id) ON DELETE SET NULL,
    ADD CONSTRAINT reclassify_runs_started_by_person_is_a_person
        CHECK (started_by_person_id IS NULL OR started_by_kind = 'person'),
    ADD CONSTRAINT reclassify_runs_started_by_token_is_a_token
        CHECK (started_by_token_id IS NULL OR started_by_kind = 'token');

-- A project's retention settings: who set them last.
ALTER TABLE project_retention
    ADD COLUMN updated_by_kind text CHECK (updated_by_kind IN ('person', 'token', 'service')),
    ADD COLUMN updated_by_person_id bigint REFERENCES people (id) ON DELETE SET NULL,
    ADD COLUMN updated_by_token_id bigint REFERENCES tokens (id) ON DELETE SET NULL,
    ADD CONSTRAINT project_retention_updated_by_person_is_a_person
        CHECK (updated_by_person_id IS NULL OR updated_by_kind = 'person'),
    ADD CONSTRAINT project_retention_updated_by_token_is_a_token
        CHECK (updated_by_token_id IS NULL OR updated_by_kind = 'token');
