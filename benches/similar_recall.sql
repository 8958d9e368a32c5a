-- How many of the exactly most similar groups the band-key lookup finds (migration 0051,
-- `storage::groups::similar_groups`), over every live group of a database:
--
--   psql "$DATABASE_URL" -f benches/similar_recall.sql
--
-- For each live group as the probe, the exact answer is the five other live groups of
-- highest `similarity` (at least 0.3), read from every group; the lookup's answer is the same
-- ranking over the candidates its band keys give (24 newest groups a key). Recall counts a
-- hit when the lookup's i-th group is as similar as the exact i-th (ties are equal answers).
-- Reads every pair of groups: for a knowledge base of a few thousand groups.
WITH probe AS (
    SELECT id, signature FROM groups WHERE merged_into IS NULL AND signature <> ''
),
exact AS (
    SELECT p.id AS probe, e.sim, row_number() OVER (PARTITION BY p.id ORDER BY e.sim DESC) AS rank
    FROM probe p,
    LATERAL (SELECT similarity(g.signature, p.signature) AS sim FROM groups g
             WHERE g.id <> p.id AND g.merged_into IS NULL AND g.signature <> ''
               AND similarity(g.signature, p.signature) >= 0.3
             ORDER BY 1 DESC LIMIT 5) e
),
banded AS (
    SELECT p.id AS probe, l.sim, row_number() OVER (PARTITION BY p.id ORDER BY l.sim DESC) AS rank
    FROM probe p,
    LATERAL (SELECT similarity(g.signature, p.signature) AS sim
             FROM (SELECT DISTINCT b.group_id
                   FROM unnest(signature_bands(p.signature)) AS k(key),
                   LATERAL (SELECT group_id FROM group_bands
                            WHERE key = k.key AND group_id <> p.id
                            ORDER BY group_id DESC LIMIT 24) b) c
             JOIN groups g ON g.id = c.group_id
             WHERE g.merged_into IS NULL AND similarity(g.signature, p.signature) >= 0.3
             ORDER BY 1 DESC LIMIT 5) l
)
SELECT (SELECT count(*) FROM probe) AS groups,
       count(*) AS exact_answers,
       count(*) FILTER (WHERE b.sim IS NOT NULL AND b.sim >= e.sim - 1e-6) AS found,
       round(100.0 * count(*) FILTER (WHERE b.sim IS NOT NULL AND b.sim >= e.sim - 1e-6)
             / nullif(count(*), 0), 1) AS recall_percent,
       count(*) FILTER (WHERE e.rank = 1) AS probes_with_an_answer,
       count(*) FILTER (WHERE e.rank = 1 AND b.sim IS NOT NULL AND b.sim >= e.sim - 1e-6)
           AS best_found
FROM exact e LEFT JOIN banded b ON b.probe = e.probe AND b.rank = e.rank;
