-- Similar failures of a recurring failure are remembered between its uploads (issue 42): the
-- nearest-signature lookup cost ~1.9 ms of PostgreSQL per upload of a failure already seen,
-- as much as storing the report. A remembered answer holds while no group was added, deleted,
-- merged, unmerged or given a new signature: every such statement advances this sequence, and
-- a reader compares its value with the one it remembered the answer at
-- (`storage::groups::NearestMemo`). A sequence, not a row: advancing it takes no lock and is
-- seen by every session at once, whichever replica made the change.
CREATE SEQUENCE groups_shape_version;

CREATE FUNCTION groups_shape_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM nextval('groups_shape_version');
    RETURN NULL;
END
$$;

CREATE TRIGGER groups_shape_changed
    AFTER INSERT OR DELETE OR UPDATE OF signature, merged_into OR TRUNCATE ON groups
    FOR EACH STATEMENT EXECUTE FUNCTION groups_shape_changed();
