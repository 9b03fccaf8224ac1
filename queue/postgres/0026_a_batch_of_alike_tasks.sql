-- enqueue_many's batch costs the server its rows, not their sameness (issue 29 item 5).
--
-- A batch of jobs is 10,000 tasks that differ only in their id and one event (the call
-- with its input): the same queue, start, key, priority, creation and pin. Sent through
-- noeta_create_tasks it was eight arrays of 10,000-30,000 elements for the client to dump,
-- and on the server a sort, a join and a JSON parse per task to find each task's pins
-- (about a quarter of the tasks insert) and an external sort to join 30,000 events to
-- their ids (bench/enqueue_split.py). noeta_create_tasks_alike takes the shared parts once
-- and the ids and the one event of each task as two arrays: its needs are read once, its
-- events are a cross join of the tasks and the shared layout, and no RETURNING list is
-- gathered to find a taken id (the insert's row count says whether one was).
CREATE OR REPLACE FUNCTION noeta_create_tasks_alike(p_ids text[], p_own_data text[], p_queue text, p_ready timestamptz, p_key text, p_priority integer, p_types text[], p_shared_data text[], p_own_seq integer)
 RETURNS integer
 LANGUAGE plpgsql
AS $function$
DECLARE
    v_needs text[];
    v_created bigint;
    v_taken text;
BEGIN
    -- Each task's log is p_types, with p_shared_data at every seq but p_own_seq, where
    -- each task has its own (p_own_data, in p_ids' order). A pin is shared: needs
    -- (0022, ADR-0092) are the names it pins, read once for the batch.
    IF p_types[p_own_seq] = 'PluginsPinned' THEN
        RAISE EXCEPTION 'noeta_create_tasks_alike: a pin must be shared, not per task';
    END IF;
    SELECT array_agg(DISTINCT pin ->> 0 ORDER BY pin ->> 0) INTO v_needs
      FROM unnest(p_types, p_shared_data) AS e(type, data)
     CROSS JOIN LATERAL json_array_elements(
           CASE WHEN e.type = 'PluginsPinned' THEN e.data::json -> 'pins' END) AS pin;
    BEGIN
        INSERT INTO tasks (id, queue, status, ready_at, claimable_at, last_seq,
                           concurrency_key, priority, needs)
            SELECT t.id, p_queue, 'ready', p_ready, coalesce(p_ready, clock_timestamp()),
                   cardinality(p_types), p_key, p_priority, v_needs
              FROM unnest(p_ids) AS t(id);
        GET DIAGNOSTICS v_created = ROW_COUNT;
    EXCEPTION WHEN unique_violation THEN
        -- Rolled back: the first id a task holds (or a pruned one kept) is the taken one.
        SELECT t.id INTO v_taken
          FROM unnest(p_ids) WITH ORDINALITY AS t(id, ord)
         WHERE EXISTS (SELECT 1 FROM tasks WHERE tasks.id = t.id)
            OR EXISTS (SELECT 1 FROM pruned_task_ids WHERE pruned_task_ids.id = t.id)
         ORDER BY t.ord LIMIT 1;
        -- None: an id was given twice (the client refuses that before sending).
        RAISE EXCEPTION USING ERRCODE = 'NT409', MESSAGE = coalesce(v_taken, '?');
    END;
    IF v_created <> coalesce(cardinality(p_ids), 0) THEN
        -- tasks_keep_pruned_ids_taken skipped a pruned id: the first without its row.
        SELECT t.id INTO v_taken
          FROM unnest(p_ids) WITH ORDINALITY AS t(id, ord)
         WHERE NOT EXISTS (SELECT 1 FROM tasks WHERE tasks.id = t.id)
         ORDER BY t.ord LIMIT 1;
        RAISE EXCEPTION USING ERRCODE = 'NT409', MESSAGE = coalesce(v_taken, '?');
    END IF;
    -- Task by task, each one's events in order (the lateral subquery keeps the tasks
    -- outside: crossed plainly, the planner wrote seq 1 of every task, then seq 2...):
    -- no join, no sort, and the events_pkey entries of one task side by side.
    INSERT INTO events (task_id, seq, type, data)
        SELECT t.id, e.seq, e.type, e.data
          FROM unnest(p_ids, p_own_data) AS t(id, own)
         CROSS JOIN LATERAL (
               SELECT s.seq, p_types[s.seq],
                      CASE WHEN s.seq = p_own_seq THEN t.own ELSE p_shared_data[s.seq] END
                 FROM generate_subscripts(p_types, 1) AS s(seq)) AS e(seq, type, data);
    RETURN v_created;
END $function$;

-- The two forms of noeta_create_tasks repeated the needs subquery (0023): the older one
-- now calls the newer one. Its file, all of it:
CREATE OR REPLACE FUNCTION noeta_create_tasks(p_ids text[], p_queues text[], p_ready timestamp with time zone[], p_counts integer[], p_event_task integer[], p_event_seq integer[], p_types text[], p_data text[])
 RETURNS integer
 LANGUAGE plpgsql
AS $function$
BEGIN
    -- The form before keys and priorities (0010), for a client of that age: every task
    -- without a key, at priority 0, through the one body below.
    RETURN noeta_create_tasks(p_ids, p_queues, p_ready, p_counts, p_event_task, p_event_seq,
                              p_types, p_data,
                              array_fill(NULL::text, ARRAY[coalesce(cardinality(p_ids), 0)]),
                              array_fill(0, ARRAY[coalesce(cardinality(p_ids), 0)]));
END $function$;

CREATE OR REPLACE FUNCTION noeta_create_tasks(p_ids text[], p_queues text[], p_ready timestamp with time zone[], p_counts integer[], p_event_task integer[], p_event_seq integer[], p_types text[], p_data text[], p_keys text[], p_priorities integer[])
 RETURNS integer
 LANGUAGE plpgsql
AS $function$
DECLARE
    v_created text[];
    v_taken text;
BEGIN
    WITH inserted AS (
        -- needs (0022, ADR-0092): the names each task's PluginsPinned event pins.
        INSERT INTO tasks (id, queue, status, ready_at, claimable_at, last_seq,
                           concurrency_key, priority, needs)
            SELECT t.id, t.queue, 'ready', t.ready, coalesce(t.ready, clock_timestamp()),
                   t.count, t.key, t.priority, pinned.needs
              FROM unnest(p_ids, p_queues, p_ready, p_counts, p_keys, p_priorities)
                   WITH ORDINALITY AS t(id, queue, ready, count, key, priority, ord)
              LEFT JOIN (SELECT e.task, array_agg(DISTINCT pin ->> 0 ORDER BY pin ->> 0)
                           FROM unnest(p_event_task, p_types, p_data) AS e(task, type, data)
                          CROSS JOIN LATERAL json_array_elements(
                                CASE WHEN e.type = 'PluginsPinned'
                                     THEN e.data::json -> 'pins' END) AS pin
                          GROUP BY e.task) AS pinned(task, needs) ON pinned.task = t.ord
            ON CONFLICT (id) DO NOTHING
            RETURNING id)
    SELECT array_agg(id) INTO v_created FROM inserted;
    IF coalesce(cardinality(v_created), 0) <> coalesce(cardinality(p_ids), 0) THEN
        SELECT t.id INTO v_taken
          FROM unnest(p_ids) WITH ORDINALITY AS t(id, ord)
         WHERE NOT EXISTS (SELECT 1 FROM unnest(v_created) AS made(id) WHERE made.id = t.id)
         ORDER BY t.ord LIMIT 1;
        RAISE EXCEPTION USING ERRCODE = 'NT409', MESSAGE = coalesce(v_taken, '?');
    END IF;
    -- A join, not p_ids[e.task]: subscripting a text[] walks it from the start, so a
    -- subscript per event made a batch quadratic (0.84 s for 30,000 events, 0.12 s so).
    INSERT INTO events (task_id, seq, type, data)
        SELECT t.id, e.seq, e.type, e.data
          FROM unnest(p_event_task, p_event_seq, p_types, p_data) AS e(task, seq, type, data)
          JOIN unnest(p_ids) WITH ORDINALITY AS t(id, ord) ON t.ord = e.task;
    RETURN cardinality(v_created);
END $function$;

-- A prune takes the unique keys of the jobs it removes (issue 29, ADR-0093's loose end):
-- job_unique_keys had no reader by job and no pruning, so each key ever used stayed. The
-- index lets a batch find its jobs' keys; only an enqueue with a key writes it.
CREATE INDEX job_unique_keys_by_task ON job_unique_keys (task_id);

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
    IF p_keep_ids THEN
        INSERT INTO pruned_task_ids (id) SELECT unnest(v_ids) ON CONFLICT (id) DO NOTHING;
    END IF;
    DELETE FROM tasks WHERE id = ANY (v_ids);
END $function$;
