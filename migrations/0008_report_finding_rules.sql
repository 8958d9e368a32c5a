-- The rule ids a report's findings name, kept beside the large (toasted) classification so the
-- rules list counts hits per rule by reading a few bytes per report instead of every
-- classification (446 ms for 100,000 reports before this column). Uploads and reclassification
-- write it with the classification. Existing rows are filled here: that writes new versions of
-- the small heap rows only (the unchanged logs and classifications stay where they are in
-- TOAST), where a stored generated column would rewrite the whole table.
ALTER TABLE reports ADD COLUMN finding_rules jsonb;
UPDATE reports SET finding_rules = jsonb_path_query_array(classification, '$.findings[*].rule');
