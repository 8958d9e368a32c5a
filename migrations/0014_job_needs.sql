-- Routing (issue 17): what a job needs to run. 'gpu' jobs go only to workers with a GPU; 'any'
-- jobs (failures PyTorch also raises on the CPU: indices, devices, dtypes, shapes) may go to a
-- worker without one, which runs them under CPU translation. Jobs queued before this could be
-- claimed by any worker; they keep that.
ALTER TABLE jobs ADD COLUMN needs text NOT NULL DEFAULT 'any' CHECK (needs IN ('gpu', 'any'));
