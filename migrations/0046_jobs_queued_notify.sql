-- A job queued on one replica wakes the claims waiting on every replica (issue 42 item 4):
-- before, a worker long-polling another replica found it at that replica's next look (1 s).
-- Every way a job becomes claimable (an upload with a script, a re-queue, a lease the reaper
-- took back) writes a row whose state is 'queued'; the notification is sent when that
-- transaction commits, and several in one transaction are sent once.
CREATE FUNCTION jobs_queued_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('gpu_triage_jobs', '');
    RETURN NULL;
END
$$;

CREATE TRIGGER jobs_queued_notify
    AFTER INSERT OR UPDATE OF state ON jobs
    FOR EACH ROW WHEN (NEW.state = 'queued')
    EXECUTE FUNCTION jobs_queued_notify();
