CREATE OR REPLACE FUNCTION noeta_create_unique_task(p_id text, p_queue text, p_ready timestamp with time zone, p_types text[], p_data text[], p_key text, p_priority integer, p_job text, p_unique_key text, p_unique_for interval, p_debounce interval)
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
        -- Never claimed, so no model-limit hold to drop; finished_at set here (0040).
        UPDATE tasks SET status = 'cancelled', ready_at = NULL, claimable_at = NULL,
                         updated_at = v_now, finished_at = v_now, last_seq = last_seq + 1
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
