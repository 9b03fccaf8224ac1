-- Text search over tasks (issue 31 item 3, ADR-0102): a table of what a search matches
-- (the id, the prompt's opening, a job's function name, a failed task's error), one row
-- a task, lowercased. `noeta web` and `noeta tasks --search` fill it in batches, walking
-- tasks by creation and by finish past two marks: nothing that creates, claims or
-- finishes a task writes it, and no trigger or index on tasks or events is added.
CREATE TABLE task_search (
    task_id    text PRIMARY KEY,
    created_at timestamptz NOT NULL,  -- the task's, so a search pages newest first
    haystack   text NOT NULL
);
CREATE INDEX task_search_by_creation ON task_search (created_at, task_id);

-- Where each walk stopped: every task before `(at, id)` in its order (by creation; by
-- finish) is in task_search as it was then. A search reads the tasks after the marks
-- directly, so a table behind is slower, never wrong.
CREATE TABLE task_search_marks (
    walk text PRIMARY KEY CHECK (walk IN ('created', 'finished')),
    at   timestamptz NOT NULL,
    id   text NOT NULL
);
INSERT INTO task_search_marks (walk, at, id)
VALUES ('created', '-infinity', ''), ('finished', '-infinity', '');

-- A trigram index makes a search of three characters or more an index lookup. pg_trgm
-- ships with PostgreSQL's contrib, which a server may lack, and creating it needs a
-- right a store's role may not have: then there is no index, and a search reads the
-- whole (narrow) table instead; `noeta web` says so once. The extension goes to public,
-- not to the store's schema: a schema dropped with it must not take other schemas'
-- indexes along.
DO $$
DECLARE
    v_schema text;
BEGIN
    BEGIN
        CREATE EXTENSION IF NOT EXISTS pg_trgm WITH SCHEMA public;
    EXCEPTION WHEN OTHERS THEN
        RAISE NOTICE 'noeta: no pg_trgm (%): text search reads task_search whole', SQLERRM;
    END;
    SELECT extnamespace::regnamespace::text INTO v_schema
      FROM pg_extension WHERE extname = 'pg_trgm';
    IF v_schema IS NOT NULL THEN
        EXECUTE format(
            'CREATE INDEX task_search_trigrams ON task_search USING gin (haystack %s.gin_trgm_ops)',
            v_schema);
    END IF;
END $$;
