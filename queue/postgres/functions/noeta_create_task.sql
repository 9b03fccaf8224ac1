CREATE OR REPLACE FUNCTION noeta_create_task(p_id text, p_queue text, p_ready timestamp with time zone, p_types text[], p_data text[])
 RETURNS boolean
 LANGUAGE plpgsql
AS $function$
BEGIN
    RETURN noeta_create_task(p_id, p_queue, p_ready, p_types, p_data, NULL, 0);
END $function$;

CREATE OR REPLACE FUNCTION noeta_create_task(p_id text, p_queue text, p_ready timestamp with time zone, p_types text[], p_data text[], p_key text, p_priority integer)
 RETURNS boolean
 LANGUAGE plpgsql
AS $function$
BEGIN
    -- needs (0022, ADR-0092): the names its PluginsPinned event pins (a job's module),
    -- written with the row: a trigger's UPDATE per create cost a bulk create 2.8x.
    INSERT INTO tasks (id, queue, status, ready_at, claimable_at, last_seq,
                       concurrency_key, priority, needs)
        VALUES (p_id, p_queue, 'ready', p_ready, coalesce(p_ready, clock_timestamp()),
                coalesce(cardinality(p_types), 0), p_key, p_priority,
                (SELECT array_agg(DISTINCT pin ->> 0 ORDER BY pin ->> 0)
                   FROM unnest(p_types, p_data) AS e(type, data)
                  CROSS JOIN LATERAL json_array_elements(CASE WHEN e.type = 'PluginsPinned'
                                                         THEN e.data::json -> 'pins' END) AS pin))
        ON CONFLICT (id) DO NOTHING;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    INSERT INTO events (task_id, seq, type, data)
        SELECT p_id, e.ord, e.type, e.data
          FROM unnest(p_types, p_data) WITH ORDINALITY AS e(type, data, ord);
    RETURN true;
END $function$;
