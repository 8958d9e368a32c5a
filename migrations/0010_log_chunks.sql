-- A stored log is kept as independently gzip-compressed chunks of whole lines with a line
-- index, so a report page reads and decompresses only the chunk or two that hold its 400 lines
-- and the raw download streams chunk by chunk: memory per view stays flat whatever the log's
-- size (issue 16 item 4). The chunks concatenated in `seq` order are one multi-member gzip
-- stream of the whole log.
CREATE TABLE report_log_chunks (
    report_id  bigint  NOT NULL REFERENCES reports (id) ON DELETE CASCADE,
    seq        integer NOT NULL,
    -- 1-based number of the chunk's first line in the whole log.
    first_line bigint  NOT NULL,
    -- Lines in the chunk (a final line without a newline counts).
    lines      bigint  NOT NULL,
    data       bytea   NOT NULL,
    PRIMARY KEY (report_id, seq)
);
-- Large compressed values: no point in PostgreSQL compressing them again.
ALTER TABLE report_log_chunks ALTER COLUMN data SET STORAGE EXTERNAL;

-- Logs stored before this migration become one chunk each (their pages still read the whole
-- log, as before).
INSERT INTO report_log_chunks (report_id, seq, first_line, lines, data)
SELECT id, 0, 1, log_lines, log_gz FROM reports;

ALTER TABLE reports DROP COLUMN log_gz;
