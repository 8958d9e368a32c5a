-- Workers seen recently (issue 19): each worker's last contact with the server, so the report
-- page can say whether anyone will pick a queued job up. A worker is known by the name it
-- claims with (`--name`, else `hostname:pid`); a claim poll, a heartbeat or a result counts as
-- contact. Writes are throttled (at most one per worker per throttle interval unless what it
-- says about itself changed), so a fleet of idle workers does not write a row per poll. Rows
-- of workers not seen for a week are forgotten by the reaper.
CREATE TABLE workers (
    name          text PRIMARY KEY CHECK (length(name) BETWEEN 1 AND 200),
    first_seen_at timestamptz NOT NULL DEFAULT now(),
    last_seen_at  timestamptz NOT NULL DEFAULT now(),
    -- What the last recorded contact was.
    last_contact  text NOT NULL CHECK (last_contact IN ('claim', 'heartbeat', 'result')),
    -- What its last claim said about itself: the GPU description (null without one), whether
    -- it runs without a GPU, and its sandbox (`bwrap` or `none`).
    gpu           jsonb,
    no_gpu        boolean NOT NULL DEFAULT false,
    sandbox       text NOT NULL DEFAULT ''
);
CREATE INDEX workers_last_seen ON workers (last_seen_at DESC);

-- When the running attempt's worker last extended its lease (null until its first heartbeat).
ALTER TABLE jobs ADD COLUMN heartbeat_at timestamptz;
