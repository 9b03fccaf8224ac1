CREATE OR REPLACE FUNCTION noeta_deliver(p_task text, p_key text, p_payload text)
 RETURNS boolean
 LANGUAGE plpgsql
AS $function$
DECLARE
    v_status text;
    v_prefix text;
    v_inserted boolean;
BEGIN
    SELECT status, wake_prefix INTO v_status, v_prefix FROM tasks WHERE id = p_task FOR UPDATE;
    IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'NT404', MESSAGE = p_task;
    END IF;
    INSERT INTO inbox (task_id, dedupe_key, payload) VALUES (p_task, p_key, p_payload)
        ON CONFLICT (task_id, dedupe_key) DO NOTHING;
    v_inserted := FOUND;
    IF v_inserted AND v_status = 'waiting'
       AND (v_prefix IS NULL OR starts_with(coalesce(p_key, ''), v_prefix)
            OR p_key = 'cancel') THEN  -- a cancel request wakes any wait
        UPDATE tasks
           SET claimable_at = LEAST(coalesce(claimable_at, 'infinity'), clock_timestamp()),
               updated_at = clock_timestamp()
         WHERE id = p_task;
    END IF;
    RETURN v_inserted;
END $function$;
