CREATE OR REPLACE FUNCTION noeta_insert_events(p_task text, p_epoch bigint, p_after bigint, p_events jsonb)
 RETURNS bigint
 LANGUAGE plpgsql
AS $function$
BEGIN
    INSERT INTO events (task_id, seq, type, data, epoch, owner)
        SELECT p_task, p_after + e.ord, e.pair->>0, e.pair->>1, p_epoch,
               (SELECT owner FROM tasks WHERE id = p_task)
          FROM jsonb_array_elements(p_events) WITH ORDINALITY AS e(pair, ord);
    RETURN p_after + jsonb_array_length(p_events);
END $function$;
