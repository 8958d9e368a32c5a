-- Similar failures are looked up on every upload of a failure not seen before (issue 42): the
-- groups nearest to its signature by trigram distance, merged groups left out. With the
-- filter `merged_into IS NULL` next to the nearest-first `ORDER BY ... LIMIT`, the planner
-- guesses how many groups pass it; before `groups` is analyzed that guess is 0.5% of the
-- rows, fewer than the 50 the lookup reads, so it chose to compute the distance to every
-- group and sort them (a cost that grew with each new group until autovacuum analyzed the
-- table). This index orders the groups by a signature that is empty for a merged group, so
-- the lookup needs no filter the planner has to guess at: merged groups sort after every
-- group with a trigram in common and are dropped after the nearest are read
-- (`storage::groups::similar_groups` holds the matching expression).
DROP INDEX groups_signature;
CREATE INDEX groups_live_signature ON groups USING gist
    ((CASE WHEN merged_into IS NULL THEN signature ELSE '' END) gist_trgm_ops);
