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

-- A pruned task's row of the search goes with it.
CREATE OR REPLACE FUNCTION noeta_prune_finished(p_before timestamp with time zone, p_queue text, p_limit integer, p_keep_ids boolean, OUT tasks_pruned integer, OUT events_pruned bigint)
 RETURNS record
 LANGUAGE sql
AS $function$
    SELECT tasks_pruned, events_pruned
      FROM noeta_prune_finished(p_before, p_queue, p_limit, p_keep_ids, 20000)
$function$;

CREATE OR REPLACE FUNCTION noeta_prune_finished(p_before timestamp with time zone, p_queue text, p_limit integer, p_keep_ids boolean, p_event_limit bigint, OUT tasks_pruned integer, OUT events_pruned bigint, OUT more boolean)
 RETURNS record
 LANGUAGE plpgsql
AS $function$
DECLARE
    v_ids text[];
    v_oldest text;
    v_left bigint;
    v_picked int;
BEGIN
    tasks_pruned := 0;
    events_pruned := 0;
    more := false;
    -- The first prune that keeps ids turns on the check of kept ids at every create
    -- (0018: off while none is kept). First, before any row lock: the table lock it
    -- takes waits for every write in flight, so no create misses an id kept here.
    IF p_keep_ids AND EXISTS (SELECT FROM pg_trigger
                               WHERE tgrelid = 'tasks'::regclass
                                 AND tgname = 'tasks_keep_pruned_ids_taken'
                                 AND tgenabled = 'D') THEN
        IF NOT pg_has_role((SELECT relowner FROM pg_class WHERE oid = 'tasks'::regclass),
                           'MEMBER') THEN  -- as the DELETE below would say
            RAISE EXCEPTION 'permission denied for table tasks'
                  USING ERRCODE = 'insufficient_privilege';
        END IF;
        ALTER TABLE tasks ENABLE TRIGGER tasks_keep_pruned_ids_taken;
    END IF;
    WITH picked AS MATERIALIZED (
        SELECT t.id, t.finished_at, t.last_seq FROM tasks t
         WHERE t.finished_at < p_before
           AND (p_queue IS NULL OR t.queue = p_queue)
           AND noeta_may_prune(t.id)
         ORDER BY t.finished_at
         LIMIT p_limit
         FOR UPDATE OF t SKIP LOCKED)
    SELECT array_agg(c.id) FILTER (WHERE c.events_so_far <= p_event_limit),
           min(c.id) FILTER (WHERE c.n = 1), count(*)
      INTO v_ids, v_oldest, v_picked
      FROM (SELECT p.id, sum(p.last_seq) OVER w AS events_so_far, row_number() OVER w AS n
              FROM picked AS p WINDOW w AS (ORDER BY p.finished_at, p.id)) AS c;
    IF v_ids IS NULL AND v_oldest IS NOT NULL THEN
        SELECT max(e.seq) INTO v_left FROM events e WHERE e.task_id = v_oldest;
        IF v_left > p_event_limit THEN
            DELETE FROM events e WHERE e.task_id = v_oldest AND e.seq > v_left - p_event_limit;
            GET DIAGNOSTICS events_pruned = ROW_COUNT;
            more := true;
            RETURN;
        END IF;
        v_ids := ARRAY[v_oldest];
    END IF;
    tasks_pruned := coalesce(cardinality(v_ids), 0);
    more := v_picked = p_limit OR tasks_pruned < v_picked;
    IF tasks_pruned = 0 THEN
        RETURN;
    END IF;
    DELETE FROM events WHERE task_id = ANY (v_ids);
    GET DIAGNOSTICS events_pruned = ROW_COUNT;
    DELETE FROM inbox WHERE task_id = ANY (v_ids);
    DELETE FROM snapshots WHERE task_id = ANY (v_ids);
    DELETE FROM late_results WHERE task_id = ANY (v_ids);
    DELETE FROM cron_fires WHERE task_id = ANY (v_ids);
    DELETE FROM model_limit_holds WHERE task_id = ANY (v_ids);
    -- Their unique keys (0026): a key whose job is gone holds nothing (the create looks
    -- for the job) and its row would stay for ever. A key a producer has moved to a newer
    -- job meanwhile names that one, and stays.
    DELETE FROM job_unique_keys WHERE task_id = ANY (v_ids);
    -- Their rows of the text search (0028): a search joins tasks and would never show
    -- them, but nothing else would take them away.
    DELETE FROM task_search WHERE task_id = ANY (v_ids);
    IF p_keep_ids THEN
        INSERT INTO pruned_task_ids (id) SELECT unnest(v_ids) ON CONFLICT (id) DO NOTHING;
    END IF;
    DELETE FROM tasks WHERE id = ANY (v_ids);
END $function$;
