-- Reproduction scripts in the object store (issue 42 item 2: "new logs, archives and
-- attachments go to the store"). With `--log-store`, an uploaded script is an object of its
-- own, `{script_prefix}script`, under a prefix apart from the log's: retention may remove a
-- log and keep the report, and a job may still run its script. PostgreSQL keeps the prefix and
-- the SHA-256 of the script's bytes (checked on every read and by `db move-logs`); `script`
-- holds the text only for a script kept in the row.
ALTER TABLE reports
    ADD COLUMN script_prefix text,
    ADD COLUMN script_sha256 bytea,
    ADD CONSTRAINT reports_script_one_place CHECK (
        script_prefix IS NULL OR (script IS NULL AND script_sha256 IS NOT NULL));

-- Whatever deletes reports (retention, a test, an operator), the script objects they name are
-- queued for the sweeper in the same transaction, as the log chunks' are (migration 0039).
CREATE FUNCTION queue_script_object_sweep() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO log_object_sweeps (prefix, due)
    SELECT DISTINCT script_prefix, now() FROM gone WHERE script_prefix IS NOT NULL
    ON CONFLICT (prefix) DO UPDATE SET due = least(log_object_sweeps.due, excluded.due);
    RETURN NULL;
END $$;
CREATE TRIGGER reports_script_sweep AFTER DELETE ON reports
    REFERENCING OLD TABLE AS gone FOR EACH STATEMENT EXECUTE FUNCTION queue_script_object_sweep();
