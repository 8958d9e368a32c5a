-- Similar failures are found through keys read from a B-tree, not by walking a trigram index
-- (issue 42). The nearest-first walk of `groups_live_signature` (migrations 0029, 0048) read
-- the whole 28 MB index at 100,000 groups whose signatures share most of their trigrams
-- (3,611 buffers, 28-56 ms a new failure, 94.8 ms under 16 clients): a GiST page's union of
-- alike signatures rules nothing out, so the cost grew with the groups stored.
--
-- Instead each group keeps the MinHash band keys of its signature's trigram set
-- (`rules::likeness`: 16 keys; two signatures of likeness s share one with probability
-- 1 - (1 - s^2)^16). A lookup reads, for each key of a new failure's signature, the newest
-- groups holding it, a bounded range of this B-tree, and ranks those few candidates by their
-- exact likeness (`storage::groups::similar_groups`): its cost is the same at 100 groups or at
-- 100,000. The server computes the keys (they are written with each new group); the groups
-- stored before this migration are keyed by the server once, in the background, at its next
-- start (`app::similar::key_groups`). A merged group keeps its keys, so an unmerge needs
-- nothing; lookups leave merged groups out.
CREATE TABLE group_bands (
    key int8 NOT NULL,
    group_id int8 NOT NULL REFERENCES groups (id) ON DELETE CASCADE,
    PRIMARY KEY (key, group_id)
);
-- Deleting a group, and finding the groups without keys.
CREATE INDEX group_bands_group ON group_bands (group_id);

-- Nothing else orders groups by trigram distance; the index cost every new group a GiST
-- insert with 256-byte signatures.
DROP INDEX groups_live_signature;
