-- The nearest-signature scan of a new failure is the costliest statement of its upload once
-- groups are many (issue 42): 70 ms on average at 100,000 groups in the API benchmark, whose
-- failures share most of their trigrams. gist_trgm_ops keeps a 12-byte signature of each
-- entry's trigrams by default; with so many alike strings the index pages' signatures fill up
-- and the distance order visits far more candidates than it returns. A 256-byte signature
-- halves the scan's time on 100,000 such signatures (42 -> 22 ms, 10-25 ms against 12-69 ms
-- over eight lookups) and changes no answer: the index only orders candidates, distances are
-- computed on the strings. Same name and expression as migration 0029's index.
DROP INDEX groups_live_signature;
CREATE INDEX groups_live_signature ON groups USING gist
    ((CASE WHEN merged_into IS NULL THEN signature ELSE '' END) gist_trgm_ops(siglen = 256));
