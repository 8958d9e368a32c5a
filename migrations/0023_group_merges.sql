-- Merging groups (issue 30 item 3): one group's reports, fixes, counts of deleted reports and
-- history move to another, and the merged group's row stays, pointing at where they went. Its
-- fingerprint stays on its row (fingerprints are unique), so an upload or a reclassification
-- that finds it follows `merged_into` to the group that holds the failure now; its URL answers
-- with that group. Chains are kept one step long: merging B into C re-points every group that
-- was merged into B at C.
ALTER TABLE groups
    ADD COLUMN merged_into bigint REFERENCES groups (id),
    ADD CONSTRAINT groups_not_merged_into_itself CHECK (merged_into <> id);
-- The groups merged into a group (its page names them), and the chains a merge re-points.
CREATE INDEX groups_merged_into ON groups (merged_into) WHERE merged_into IS NOT NULL;

-- A merge is a history entry of the group that absorbed the other (`from` the merged group's
-- id, `to` its own); entries that moved with a merge keep the group they were written for.
ALTER TABLE group_events DROP CONSTRAINT group_events_action_check;
ALTER TABLE group_events ADD CONSTRAINT group_events_action_check
    CHECK (action IN ('state', 'assignee', 'older_build', 'merge'));
ALTER TABLE group_events ADD COLUMN merged_from bigint REFERENCES groups (id);
