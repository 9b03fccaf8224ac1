CREATE OR REPLACE FUNCTION noeta_create_unique_tasks(p_ids text[], p_queues text[], p_ready timestamp with time zone[], p_counts integer[], p_types text[], p_data text[], p_keys text[], p_priorities integer[], p_job text, p_unique_keys text[], p_unique_for interval, p_debounce interval)
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
