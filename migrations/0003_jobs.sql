-- The reproduction queue (issue 6, DESIGN.md section 7, SECURITY.md item 11): jobs get what the
-- claiming worker said about itself and a visible reason when they die; every finished attempt
-- is recorded once per lease (so a retried result post is answered, not applied twice); each
-- job's result is one reproduction row; a report remembers when its category followed one.

ALTER TABLE jobs
    ADD COLUMN claimed_at  timestamptz,
    -- Why the job gave up (shown in the portal and the API); empty unless state = 'dead'.
    ADD COLUMN dead_reason text NOT NULL DEFAULT '',
    -- The job this one re-queues (manual re-queue from the report page), if any.
    ADD COLUMN requeued_from bigint REFERENCES jobs(id) ON DELETE SET NULL,
    ADD COLUMN requeued_by   text NOT NULL DEFAULT '',
    ADD CONSTRAINT jobs_lease_when_running
        CHECK ((state = 'running') = (lease_token IS NOT NULL AND lease_expires_at IS NOT NULL));
CREATE INDEX jobs_lease_expiry ON jobs (lease_expires_at) WHERE state = 'running';

-- One row per finished attempt of a job: the result, a worker-reported error, or an expired
-- lease. The lease token is unique, so an attempt is recorded exactly once.
CREATE TABLE job_attempts (
    id          bigserial PRIMARY KEY,
    job_id      bigint NOT NULL REFERENCES jobs(id) ON DELETE CASCADE,
    attempt     integer NOT NULL,
    lease_token uuid NOT NULL UNIQUE,
    outcome     text NOT NULL CHECK (outcome IN ('result', 'error', 'expired')),
    error       text NOT NULL DEFAULT '',
    worker      text NOT NULL DEFAULT '',
    -- SHA-256 of the result body: a retry must carry the same result to be answered 200.
    request_sha256 bytea,
    finished_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX job_attempts_job ON job_attempts (job_id, attempt);

-- The outcome of running a report's script under CUDA_LAUNCH_BLOCKING=1: one per job.
CREATE TABLE reproductions (
    id             bigserial PRIMARY KEY,
    job_id         bigint NOT NULL UNIQUE REFERENCES jobs(id) ON DELETE CASCADE,
    report_id      bigint NOT NULL REFERENCES reports(id) ON DELETE CASCADE,
    attempt        integer NOT NULL,
    exit_code      integer,
    signal         integer,
    timed_out      boolean NOT NULL DEFAULT false,
    duration_ms    bigint NOT NULL CHECK (duration_ms >= 0),
    -- Both scrubbed of secrets before storage.
    stdout         text NOT NULL,
    stderr         text NOT NULL,
    truncated      boolean NOT NULL DEFAULT false,
    gpu            jsonb,
    no_gpu         boolean NOT NULL DEFAULT false,
    sandbox        text NOT NULL CHECK (sandbox IN ('bwrap', 'none')),
    worker         text NOT NULL DEFAULT '',
    -- The rule engine's classification (DESIGN.md section 3) of stderr followed by stdout.
    classification jsonb NOT NULL,
    created_at     timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX reproductions_report ON reproductions (report_id, id);

-- 'log': the category is the uploaded log's; 'reproduction': it followed a more specific
-- synchronous reproduction (category_reproduction_id), and original_category says what the log
-- alone gave.
ALTER TABLE reports
    ADD COLUMN category_source text NOT NULL DEFAULT 'log'
        CHECK (category_source IN ('log', 'reproduction')),
    ADD COLUMN original_category text,
    ADD COLUMN original_title text,
    ADD COLUMN category_reproduction_id bigint REFERENCES reproductions(id) ON DELETE SET NULL;
