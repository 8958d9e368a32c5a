-- Raw logs in an S3-compatible object store (issue 42, `serve --log-store s3://BUCKET/PREFIX`).
-- A chunk's bytes live either here (`data`) or in the store, as the object
-- `{object_prefix}{seq}` under the store's prefix; PostgreSQL keeps the chunk map either way:
-- line numbers, the compressed size and the SHA-256 of the compressed bytes, so a page view
-- or a find reads only the objects it needs and `db move-logs` verifies every chunk it moves.
ALTER TABLE report_log_chunks
    ALTER COLUMN data DROP NOT NULL,
    ADD COLUMN object_prefix text,
    ADD COLUMN stored_bytes int8,
    ADD COLUMN sha256 bytea,
    ADD CONSTRAINT report_log_chunks_one_place CHECK (
        (data IS NULL) = (object_prefix IS NOT NULL)
        AND (object_prefix IS NULL OR (stored_bytes IS NOT NULL AND sha256 IS NOT NULL)));

-- Object prefixes whose objects are to be deleted once `due` has passed. An upload records its
-- prefix here (due after a grace period) before it writes one object, and the transaction that
-- stores its report deletes the row: objects of an upload that never committed (a crash, the
-- store or the database down half way) are found here and removed by the sweeper. Deleting
-- chunk rows of stored objects (retention, a deleted report) queues their prefix, due at once.
CREATE TABLE log_object_sweeps (
    prefix text PRIMARY KEY,
    due    timestamptz NOT NULL
);
CREATE INDEX log_object_sweeps_due ON log_object_sweeps (due);

-- Whatever deletes the chunk rows (retention, a cascade from `reports`), the objects they name
-- are queued for the sweeper in the same transaction: no path can forget them.
CREATE FUNCTION queue_log_object_sweep() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO log_object_sweeps (prefix, due)
    SELECT DISTINCT object_prefix, now() FROM gone WHERE object_prefix IS NOT NULL
    ON CONFLICT (prefix) DO UPDATE SET due = least(log_object_sweeps.due, excluded.due);
    RETURN NULL;
END $$;
CREATE TRIGGER report_log_chunks_sweep AFTER DELETE ON report_log_chunks
    REFERENCING OLD TABLE AS gone FOR EACH STATEMENT EXECUTE FUNCTION queue_log_object_sweep();
