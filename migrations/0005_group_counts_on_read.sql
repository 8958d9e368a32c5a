-- A group's report count and last-seen time are read from its reports (the index on
-- reports (group_id, created_at DESC) answers both) instead of being kept on the group row:
-- every upload of a recurring failure updated that one row, so concurrent uploads of the same
-- failure queued on its lock for the length of a commit.
DROP INDEX IF EXISTS groups_last_seen;
ALTER TABLE groups DROP COLUMN report_count, DROP COLUMN last_seen;
