-- A failed run is many files (issue 41): a report uploaded as a run keeps its files in one log
-- (each after a `==> name <==` line, in upload order) and, here, the run's story: every file
-- with its role, rank, host, GPU and line range, the first failure and the action with its
-- reason (the `RunStory` wire type as JSON). `action` is kept as a column too, to filter on.
CREATE TABLE job_runs (
    report_id bigint PRIMARY KEY REFERENCES reports (id) ON DELETE CASCADE,
    action    text   NOT NULL
        CHECK (action IN ('fix_code', 'fix_environment', 'restart', 'drain_node')),
    files     integer NOT NULL,
    story     jsonb  NOT NULL
);
