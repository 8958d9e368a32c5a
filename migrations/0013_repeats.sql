-- Deterministic or flaky (issue 17): a job may ask for up to 5 runs of its script; the
-- reproduction keeps each run's outcome and failing line and a verdict ("fails 5/5 at
-- repro.py:13", "flaky: 2/5"), and the group remembers its latest verdict.
ALTER TABLE jobs ADD COLUMN repeats smallint NOT NULL DEFAULT 1 CHECK (repeats BETWEEN 1 AND 5);
ALTER TABLE reproductions ADD COLUMN runs jsonb, ADD COLUMN verdict text NOT NULL DEFAULT '';
ALTER TABLE groups ADD COLUMN verdict text NOT NULL DEFAULT '', ADD COLUMN verdict_at timestamptz;
