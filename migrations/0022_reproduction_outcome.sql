-- What each reproduction showed (issue 30 item 1): `reproduced`, `did_not_fail`,
-- `environment_error` (the worker's environment stopped the run before it reached the failure:
-- a missing module or interpreter, a syntax error in the script, a call the sandbox denied),
-- `timed_out` or `sandbox_error`; for the worker's own problems, what went wrong and how to fix
-- the worker. Decided once when the result is recorded. Rows stored before this migration keep
-- a null outcome and have it derived from their exit and output when read.
ALTER TABLE reproductions
    ADD COLUMN outcome text CHECK (outcome IN ('reproduced', 'did_not_fail', 'environment_error',
                                               'timed_out', 'sandbox_error')),
    ADD COLUMN outcome_reason text NOT NULL DEFAULT '',
    ADD COLUMN outcome_fix text NOT NULL DEFAULT '';
