-- How stored reports are grouped (issue 39 item 1). A failure of the program is now keyed by
-- its own frames as well as its failure line, an environment failure by its message and the
-- environment facts that decide its fix. Installations migrated to here hold groups made the
-- old way (scheme 1); `serve` regroups every stored report once with the current rules
-- (a reclassification run, which keeps merges: a merged group's fingerprint still leads to the
-- group it went into) and then records the scheme it grouped by.
ALTER TABLE instance ADD COLUMN grouping_scheme integer NOT NULL DEFAULT 1;
