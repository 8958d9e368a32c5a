-- Similar failures are found through keys read from a B-tree, not by walking a trigram index
-- (issue 42). The nearest-first walk of `groups_live_signature` (migrations 0029, 0048) read
-- the whole 28 MB index at 100,000 groups whose signatures share most of their trigrams
-- (3,611 buffers, 28-56 ms a new failure, 94.8 ms under 16 clients): a GiST page's union of
-- alike signatures rules nothing out, so the cost grew with the groups stored.
--
-- Locality-sensitive hashing instead (MinHash; Broder 1997, Leskovec et al., Mining of
-- Massive Datasets ch. 3): each signature's trigram set (pg_trgm's own, `show_trgm`, the set
-- `similarity` compares) gets 32 min-hashes, one per seed of `hashtextextended`; the
-- probability that two sets have the same min-hash for a seed is their Jaccard similarity,
-- which is what `similarity` computes. Min-hashes are taken in 16 bands of two, and each band
-- hashed into one key, so two signatures of similarity s share at least one key with
-- probability 1 - (1 - s^2)^16: 0.78 at the listing floor 0.3, 0.99 at 0.5, 1.0 from 0.7.
-- A lookup reads, for each of its 16 keys, the newest groups holding it (a bounded range of
-- the B-tree, `storage::groups::similar_groups`) and computes the exact similarity on those
-- few hundred candidates only: its cost is the same at 100 groups or at 100,000. The price
-- is recall: a group that shares no key is missed, and a key shared by thousands of groups
-- (a wording every failure of a kind has) yields only its newest ones.
CREATE FUNCTION signature_bands(sig text) RETURNS int8[]
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
    SELECT coalesce(array_agg(DISTINCT hashtextextended(band || ':' || a || ':' || b, 0)), '{}')
    FROM (
        SELECT seed / 2 AS band,
               min(h) FILTER (WHERE seed % 2 = 0) AS a,
               min(h) FILTER (WHERE seed % 2 = 1) AS b
        FROM (
            SELECT seed, min(hashtextextended(t, seed)) AS h
            FROM unnest(show_trgm(sig)) t, generate_series(0, 31) seed
            GROUP BY seed
        ) minhash
        GROUP BY seed / 2
    ) bands
$$;

-- One row per key of each live group: merged groups have none (their failures are their
-- targets' now), so a lookup never spends its bounded reads on them.
CREATE TABLE group_bands (
    key int8 NOT NULL,
    group_id int8 NOT NULL REFERENCES groups (id) ON DELETE CASCADE,
    PRIMARY KEY (key, group_id)
);
CREATE INDEX group_bands_group ON group_bands (group_id);

-- Kept by the statement that changes a group, in its transaction, whichever code path and
-- replica ran it: an insert, a new signature (regroup), a merge or an unmerge.
CREATE FUNCTION group_bands_follow() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'UPDATE' THEN
        DELETE FROM group_bands WHERE group_id = NEW.id;
    END IF;
    IF NEW.merged_into IS NULL THEN
        INSERT INTO group_bands (key, group_id)
        SELECT k, NEW.id FROM unnest(signature_bands(NEW.signature)) k;
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER group_bands_on_insert AFTER INSERT ON groups
    FOR EACH ROW EXECUTE FUNCTION group_bands_follow();
CREATE TRIGGER group_bands_on_update AFTER UPDATE OF signature, merged_into ON groups
    FOR EACH ROW
    WHEN (OLD.signature IS DISTINCT FROM NEW.signature
          OR OLD.merged_into IS DISTINCT FROM NEW.merged_into)
    EXECUTE FUNCTION group_bands_follow();

INSERT INTO group_bands (key, group_id)
SELECT k, g.id FROM groups g, unnest(signature_bands(g.signature)) k
WHERE g.merged_into IS NULL;

-- Nothing else orders groups by trigram distance; the index cost every new group a GiST
-- insert with 256-byte signatures.
DROP INDEX groups_live_signature;
