CREATE OR REPLACE FUNCTION noeta_create_tasks_alike(p_ids text[], p_own_data text[], p_queue text, p_ready timestamp with time zone, p_key text, p_priority integer, p_types text[], p_shared_data text[], p_own_seq integer)
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
