-- Search over what people remember (issue 18 item 1): each report gets a bounded search document
-- in its own table, in sections that rank differently:
--   root      the title and root-cause line (a root-cause match ranks first),
--   symptoms  the other findings,
--   names     traceback frames (path, basename, `file.py:NN`, function, code line), file name,
--             project, branch, commit, job URL,
--   excerpt   log lines: the head, lines around every finding, the tail.
-- Fix text (ranked between root causes and symptoms) is searched in `fixes`. The root-cause and
-- symptom vectors are kept apart from `doc` (all of it), so that "the newest root-cause
-- matches" is answered from small vectors and their own indexes. The vectors stay in the row
-- (STORAGE MAIN): a newest-first walk tests each row without a TOAST lookup. The texts, read
-- only for snippets and literal matches, go out of line.

-- The parts of the tokens that hold `.`, `/`, `:` or `\`, those characters read as spaces: the text
-- parser keeps `/srv/x/train.py:42` or `torch.OutOfMemoryError` whole, and people search for
-- `x/train.py` or `OutOfMemoryError`. The search asks for such words as phrases of their parts
-- too (`storage::search`), so both sides split alike.
CREATE FUNCTION search_parts(t text) RETURNS text
    LANGUAGE sql IMMUTABLE PARALLEL SAFE
    AS $$ SELECT coalesce(string_agg(translate(m[1], './:\', '    '), ' '), '')
          FROM regexp_matches(t, '(\S*[./:\\]\S*)', 'g') AS m $$;

CREATE TABLE report_search (
    report_id   bigint PRIMARY KEY REFERENCES reports (id) ON DELETE CASCADE,
    created_at  timestamptz NOT NULL,
    category    text NOT NULL,
    -- lower(project): the project filter ignores letter case.
    project     text NOT NULL,
    root        text NOT NULL DEFAULT '',
    symptoms    text NOT NULL DEFAULT '',
    names       text NOT NULL DEFAULT '',
    excerpt     text NOT NULL DEFAULT '',
    root_vec    tsvector GENERATED ALWAYS AS (
        to_tsvector('simple', root || E'\n' || search_parts(root))) STORED,
    symptom_vec tsvector GENERATED ALWAYS AS (
        to_tsvector('simple', symptoms || E'\n' || search_parts(symptoms))) STORED,
    doc         tsvector GENERATED ALWAYS AS (
        to_tsvector('simple', root || E'\n' || search_parts(root))
        || to_tsvector('simple', symptoms || E'\n' || search_parts(symptoms))
        || to_tsvector('simple', names || E'\n' || search_parts(names) || E'\n' || excerpt)) STORED
);
ALTER TABLE report_search ALTER COLUMN root_vec SET STORAGE MAIN,
    ALTER COLUMN symptom_vec SET STORAGE MAIN, ALTER COLUMN doc SET STORAGE MAIN;
-- lz4 decompresses several times faster than pglz; a server built without it keeps pglz.
DO $$
BEGIN
    ALTER TABLE report_search
        ALTER COLUMN root_vec SET COMPRESSION lz4, ALTER COLUMN symptom_vec SET COMPRESSION lz4,
        ALTER COLUMN doc SET COMPRESSION lz4,
        ALTER COLUMN names SET COMPRESSION lz4, ALTER COLUMN excerpt SET COMPRESSION lz4;
EXCEPTION WHEN feature_not_supported THEN
    RAISE NOTICE 'lz4 not available: search columns keep the default compression';
END
$$;

CREATE INDEX report_search_root ON report_search USING gin (root_vec);
CREATE INDEX report_search_head ON report_search USING gin ((root_vec || symptom_vec));
CREATE INDEX report_search_doc ON report_search USING gin (doc);
-- Literal substrings of the error text (`Select` inside `indexSelectSmallIndex`), looked for when
-- words and word prefixes find nothing; names and log lines are left out to keep it small (their
-- paths, URLs and ids match by their parts and prefixes).
CREATE INDEX report_search_literal ON report_search
    USING gin ((root || E'\n' || symptoms) gin_trgm_ops);
CREATE INDEX report_search_created ON report_search (created_at DESC, report_id DESC);
CREATE INDEX report_search_category ON report_search (category, created_at DESC, report_id DESC);
CREATE INDEX report_search_project ON report_search (project, created_at DESC, report_id DESC);

-- The words search knows, for "did you mean": filled by uploads (set-based, ON CONFLICT DO
-- NOTHING). A misspelled word's candidates are the known words of about its length that start
-- or end with the same two letters (two index ranges, bytewise order); the fewest edits wins.
CREATE TABLE search_words (word text COLLATE "C" PRIMARY KEY);
CREATE INDEX search_words_reversed ON search_words (reverse(word));

-- Reports stored before this migration keep what they had: their old search text becomes the
-- symptom section, their metadata the names section (no log excerpt: that would need the logs
-- decompressed here).
INSERT INTO report_search (report_id, created_at, category, project, root, symptoms, names)
SELECT id, created_at, category, lower(project), title || E'\n' || root_cause_text, search_text,
       concat_ws(E'\n', filename, project, branch, commit_sha, job_url)
FROM reports;
-- The same word rule as the upload pipeline (`app::upload::search_doc::words`).
INSERT INTO search_words (word)
SELECT DISTINCT w
FROM report_search,
     regexp_split_to_table(lower(root || ' ' || symptoms || ' ' || names), '[^a-z0-9]+') AS w
WHERE w ~ '^[a-z][a-z0-9]{2,31}$' AND length(regexp_replace(w, '[^0-9]+', '', 'g')) <= 2
ON CONFLICT DO NOTHING;

DROP INDEX reports_search;
DROP INDEX reports_search_trgm;
ALTER TABLE reports DROP COLUMN search, DROP COLUMN search_text;
