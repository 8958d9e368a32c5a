-- A search row holds its report's group (issue 39: search under 50 ms at 100,000 reports). The
-- search collapses its hits to one row per group and counts groups; reading each hit's group
-- from `reports` cost a lookup per hit (up to 1,000 a tier, and again for the count). The
-- column follows every move of a report between groups (merge, unmerge, regroup after a
-- reclassification, and any later statement that sets `reports.group_id`) through the trigger
-- below, in the moving statement's transaction: no code path can forget it.
ALTER TABLE report_search ADD COLUMN group_id bigint;
UPDATE report_search s SET group_id = r.group_id FROM reports r WHERE r.id = s.report_id;
ALTER TABLE report_search ALTER COLUMN group_id SET NOT NULL;

CREATE FUNCTION report_search_follow_group() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE report_search SET group_id = NEW.group_id WHERE report_id = NEW.id;
    RETURN NULL;
END
$$;

CREATE TRIGGER report_search_follow_group
    AFTER UPDATE OF group_id ON reports
    FOR EACH ROW WHEN (OLD.group_id IS DISTINCT FROM NEW.group_id)
    EXECUTE FUNCTION report_search_follow_group();
