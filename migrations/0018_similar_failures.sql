-- Similar failures: every report and group keeps its failure's signature (the root cause's
-- normalized text, or a log's last line when no rule matched, then the user's stack frames:
-- `rules::Classification::signature`), and a GiST trigram index finds the nearest groups to a
-- signature by `<->` distance without reading every group.
ALTER TABLE reports ADD COLUMN signature text NOT NULL DEFAULT '';
ALTER TABLE groups ADD COLUMN signature text NOT NULL DEFAULT '';
-- Rows stored before: the root cause with its numbers normalized, as the signature starts (the
-- frames would need every log read again; a reclassification fills them in).
UPDATE groups SET signature = left(regexp_replace(root_cause_text, '[0-9]+', '#', 'g'), 300)
 WHERE root_cause_text <> '';
UPDATE reports r SET signature = g.signature FROM groups g
 WHERE g.id = r.group_id AND g.signature <> '';
CREATE INDEX groups_signature ON groups USING gist (signature gist_trgm_ops);
