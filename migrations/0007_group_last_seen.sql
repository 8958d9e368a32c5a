-- Groups ordered by recency again come from an index: `last_seen` is back on the group row, but
-- uploads refresh it at most every 30 seconds per group (a row lock once in a while, not on
-- every upload as before 0005). Pages show the exact time, read from the group's reports.
ALTER TABLE groups ADD COLUMN last_seen timestamptz;
UPDATE groups g SET last_seen = coalesce(
    (SELECT max(r.created_at) FROM reports r WHERE r.group_id = g.id), g.first_seen);
ALTER TABLE groups ALTER COLUMN last_seen SET NOT NULL, ALTER COLUMN last_seen SET DEFAULT now();
CREATE INDEX groups_last_seen ON groups (last_seen DESC, id DESC);
