-- A token's last use moves out of its row (issue 42): an upload holds its token's row
-- `FOR SHARE` until it commits (a revocation waits for the uploads in flight, SECURITY.md item
-- 24), and with uploads overlapping all the time the once-a-minute `UPDATE tokens SET
-- last_used_at` found the row always share-locked: it waited 34 s in the API benchmark, and the
-- request that carried it with it. Writing the time in a row of its own takes no lock on the
-- token's row beyond the foreign key's, which shares with the uploads'.
CREATE TABLE token_usage (
    token_id     bigint PRIMARY KEY REFERENCES tokens(id) ON DELETE CASCADE,
    last_used_at timestamptz NOT NULL
);
INSERT INTO token_usage (token_id, last_used_at)
    SELECT id, last_used_at FROM tokens WHERE last_used_at IS NOT NULL;
ALTER TABLE tokens DROP COLUMN last_used_at;
