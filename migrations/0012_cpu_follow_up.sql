-- After a GPU run that ended in a device-side assert or an illegal memory access, the worker runs
-- the script again under CPU translation; its outcome, output and classification (issue 17).
ALTER TABLE reproductions ADD COLUMN cpu_run jsonb;
