-- noeta_create_tasks joins its events to their task ids through unnest WITH ORDINALITY:
-- p_ids[e.task] per event walked the array from its start each time, quadratic in the
-- batch (issue 29 item 5: enqueue_many of 10,000 jobs). The function file, copied:
CREATE OR REPLACE FUNCTION noeta_create_tasks(p_ids text[], p_queues text[], p_ready timestamp with time zone[], p_counts integer[], p_event_task integer[], p_event_seq integer[], p_types text[], p_data text[])
 RETURNS integer
 LANGUAGE plpgsql
AS $function$
DECLARE
    v_created text[];
    v_taken text;
BEGIN
    WITH inserted AS (
        INSERT INTO tasks (id, queue, status, ready_at, claimable_at, last_seq, needs)
            SELECT t.id, t.queue, 'ready', t.ready, coalesce(t.ready, clock_timestamp()),
                   t.count, pinned.needs
              FROM unnest(p_ids, p_queues, p_ready, p_counts)
                   WITH ORDINALITY AS t(id, queue, ready, count, ord)
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
        -- None missing: an id was given twice (the client refuses that before sending).
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


-- Unique and debounced jobs (issue 29 item 8, ADR-0093): which job holds a producer's
-- unique key. Only an enqueue that gives a key reads or writes it: a create without one
-- runs noeta_create_task(s) as before, with no statement or probe more.
CREATE TABLE job_unique_keys (
    job text NOT NULL,         -- the function's name: one key space per job
    unique_key text NOT NULL,  -- the producer's key (an order id, a user id...)
    task_id text NOT NULL,     -- the job that holds the key (its task may be pruned since)
    -- unique_for: the end of the window (the holder's creation + unique_for); NULL for a
    -- debounced key, held by its job for as long as that has not started.
    held_until timestamptz,
    PRIMARY KEY (job, unique_key)
);

-- Create a job that holds (p_job, p_unique_key), or return the job that holds it. The
-- key's row, locked first (FOR UPDATE, or made), serializes racing producers: one job.
-- unique_for: within the window of the job holding the key, and unless that ended failed
-- or cancelled, nothing is written and its id is returned. debounce: a holder not yet
-- started is cancelled ("superseded by <id>") and the new job starts p_debounce from now.
-- Returns the id of the job holding the key afterwards (p_id if it was made). A resend of
-- the same p_id (after a lost reply) returns it.
CREATE FUNCTION noeta_create_unique_task(
    p_id text, p_queue text, p_ready timestamptz, p_types text[], p_data text[],
    p_key text, p_priority integer, p_job text, p_unique_key text,
    p_unique_for interval, p_debounce interval)
 RETURNS text
 LANGUAGE plpgsql
AS $function$
DECLARE
    v_holder text;
    v_until timestamptz;
    v_now timestamptz;
    v_seq bigint;
BEGIN
    LOOP
        SELECT task_id, held_until INTO v_holder, v_until
          FROM job_unique_keys WHERE job = p_job AND unique_key = p_unique_key FOR UPDATE;
        EXIT WHEN FOUND;
        INSERT INTO job_unique_keys (job, unique_key, task_id)
            VALUES (p_job, p_unique_key, p_id) ON CONFLICT DO NOTHING;
        EXIT WHEN FOUND;  -- made and locked, no holder; else a racing producer made it
    END LOOP;
    -- Made by an earlier send of this call whose reply was lost (the client makes ids at
    -- random, and refuses id= with a unique key): the same answer, nothing written again.
    IF v_holder = p_id OR EXISTS (SELECT 1 FROM tasks WHERE id = p_id) THEN
        RETURN p_id;
    END IF;
    v_now := clock_timestamp();
    IF v_holder IS NOT NULL AND p_debounce IS NULL AND v_until > v_now
       AND EXISTS (SELECT 1 FROM tasks
                    WHERE id = v_holder AND status NOT IN ('failed', 'cancelled')) THEN
        RETURN v_holder;
    END IF;
    IF v_holder IS NOT NULL AND p_debounce IS NOT NULL THEN
        -- Not started: ready and never claimed (a claim raises owner_epoch).
        UPDATE tasks SET status = 'cancelled', ready_at = NULL, claimable_at = NULL,
                         updated_at = v_now, last_seq = last_seq + 1
         WHERE id = v_holder AND status = 'ready' AND owner_epoch = 0
        RETURNING last_seq INTO v_seq;
        IF FOUND THEN
            INSERT INTO events (task_id, seq, type, data)
                VALUES (v_holder, v_seq, 'TaskFinished',
                        json_build_object('v', 1, 'status', 'cancelled', 'answer', '',
                                          'error', 'superseded by ' || p_id)::text);
            PERFORM noeta_announce_finish(v_holder);
        END IF;
    END IF;
    IF NOT noeta_create_task(p_id, p_queue,
                             CASE WHEN p_debounce IS NULL THEN p_ready
                                  ELSE v_now + p_debounce END,
                             p_types, p_data, p_key, p_priority) THEN
        RAISE EXCEPTION USING ERRCODE = 'NT409', MESSAGE = p_id;
    END IF;
    UPDATE job_unique_keys SET task_id = p_id, held_until = v_now + p_unique_for
     WHERE job = p_job AND unique_key = p_unique_key;
    RETURN p_id;
END $function$;

-- A batch of jobs, each as noeta_create_unique_task makes it, in order (a key given twice
-- in the batch acts as two enqueues one after the other), in one transaction. A job with
-- no unique key (NULL) is created plainly. Returns, per job, the id of the job that holds
-- its key after it (its own id if it was made).
CREATE FUNCTION noeta_create_unique_tasks(
    p_ids text[], p_queues text[], p_ready timestamptz[], p_counts integer[],
    p_types text[], p_data text[], p_keys text[], p_priorities integer[], p_job text,
    p_unique_keys text[], p_unique_for interval, p_debounce interval)
 RETURNS text[]
 LANGUAGE plpgsql
AS $function$
DECLARE
    v_holders text[] := '{}';
    v_first integer := 1;  -- the index of the job's first event in p_types and p_data
    v_last integer;
BEGIN
    FOR i IN 1 .. coalesce(cardinality(p_ids), 0) LOOP
        v_last := v_first + p_counts[i] - 1;
        IF p_unique_keys[i] IS NULL THEN
            IF NOT noeta_create_task(p_ids[i], p_queues[i], p_ready[i], p_types[v_first:v_last],
                                     p_data[v_first:v_last], p_keys[i], p_priorities[i]) THEN
                RAISE EXCEPTION USING ERRCODE = 'NT409', MESSAGE = p_ids[i];
            END IF;
            v_holders := v_holders || p_ids[i];
        ELSE
            v_holders := v_holders || noeta_create_unique_task(
                p_ids[i], p_queues[i], p_ready[i], p_types[v_first:v_last],
                p_data[v_first:v_last], p_keys[i], p_priorities[i], p_job, p_unique_keys[i],
                p_unique_for, p_debounce);
        END IF;
        v_first := v_last + 1;
    END LOOP;
    RETURN v_holders;
END $function$;
