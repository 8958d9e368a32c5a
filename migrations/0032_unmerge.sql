-- Unmerging groups (issue 39 item 5): a wrong merge must be reversible, exactly, even after
-- chained merges and after uploads that a merged group's fingerprint sent to the group it went
-- into. So every row a merge moves remembers where it belongs:
-- - a group, the group its own merge put it into (`merge_parent`; `merged_into` follows chains
--   to the group that holds everything now, this one does not), so the groups merged into it
--   before it was merged go back with it;
-- - a report, a fix and a count of deleted reports, the group they belong to when another group
--   holds them through a merge (`merged_from`, like history entries since migration 0023): set
--   by the merge for what it moves, and by an upload or a reclassification that a merged
--   group's fingerprint routed elsewhere.
-- Unmerging group X moves back to X everything whose `merged_from` is X or a group merged into
-- X (its merge_parent chain reaches X), and the groups merged into X point at X again.
ALTER TABLE groups
    ADD COLUMN merge_parent bigint REFERENCES groups (id);
-- The merges made before: the group each merge entry names (the entry of the latest merge of a
-- group), else where it went.
UPDATE groups g SET merge_parent = coalesce(
    (SELECT e.to_value::bigint FROM group_events e
     WHERE e.action = 'merge' AND e.from_value = g.id::text AND e.to_value ~ '^[0-9]{1,18}$'
       AND EXISTS (SELECT 1 FROM groups p WHERE p.id = e.to_value::bigint)
     ORDER BY e.id DESC LIMIT 1),
    g.merged_into)
WHERE g.merged_into IS NOT NULL;
ALTER TABLE groups ADD CONSTRAINT groups_merge_parent_when_merged
    CHECK ((merge_parent IS NULL) = (merged_into IS NULL));
CREATE INDEX groups_merge_parent ON groups (merge_parent) WHERE merge_parent IS NOT NULL;

ALTER TABLE reports ADD COLUMN merged_from bigint REFERENCES groups (id);
-- Reports moved before: their fingerprint names the group they belong to.
UPDATE reports r SET merged_from = g.id FROM groups g
WHERE g.fingerprint = r.fingerprint AND g.id <> r.group_id AND g.merged_into IS NOT NULL;
CREATE INDEX reports_merged_from ON reports (merged_from) WHERE merged_from IS NOT NULL;

-- Fixes moved before this migration stay with the group they went to (nothing recorded where
-- they came from).
ALTER TABLE fixes ADD COLUMN merged_from bigint REFERENCES groups (id);
CREATE INDEX fixes_merged_from ON fixes (merged_from) WHERE merged_from IS NOT NULL;

-- Counts of deleted reports are kept per group they belong to (0: the holding group's own)
-- instead of being added up on a merge. Counts added up before stay the target's.
ALTER TABLE group_expired_reports ADD COLUMN merged_from bigint NOT NULL DEFAULT 0;
ALTER TABLE group_expired_reports DROP CONSTRAINT group_expired_reports_pkey;
ALTER TABLE group_expired_reports ADD PRIMARY KEY (group_id, merged_from, day, project);

ALTER TABLE group_events DROP CONSTRAINT group_events_action_check;
ALTER TABLE group_events ADD CONSTRAINT group_events_action_check
    CHECK (action IN ('state', 'assignee', 'older_build', 'merge', 'unmerge'));
