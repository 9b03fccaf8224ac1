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
