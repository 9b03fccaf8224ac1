CREATE OR REPLACE FUNCTION noeta_cron_fire(p_schedule text, p_slot timestamp with time zone, p_kind text, p_overlap text, p_detail text, p_task text, p_queue text, p_types text[], p_data text[], p_key text, p_payload text)
 RETURNS text
 LANGUAGE plpgsql
AS $function$
DECLARE
    v_last text;
    v_status text;
    v_outcome text;
    v_detail text := p_detail;
BEGIN
    INSERT INTO cron_fires (schedule, slot, outcome) VALUES (p_schedule, p_slot, 'missed')
        ON CONFLICT (schedule, slot) DO NOTHING;
    IF NOT FOUND THEN
        RETURN 'already';
    END IF;
    INSERT INTO cron_schedules (name, mark) VALUES (p_schedule, p_slot)
        ON CONFLICT (name) DO NOTHING;
    SELECT last_task INTO v_last FROM cron_schedules WHERE name = p_schedule FOR UPDATE;

    IF p_kind = 'missed' THEN
        v_outcome := 'missed';
    ELSIF p_kind = 'task' THEN
        SELECT status INTO v_status FROM tasks WHERE id = v_last;
        IF p_overlap = 'skip' AND v_status IN ('ready', 'running', 'holding', 'waiting') THEN
            v_outcome := 'skipped_overlap';
            v_detail := format('task %s is still %s', v_last, v_status);
        ELSE
            PERFORM noeta_create_task(p_task, p_queue, NULL, p_types, p_data);
            v_outcome := 'created';
            UPDATE cron_schedules SET last_task = p_task WHERE name = p_schedule;
        END IF;
    ELSE
        SELECT status INTO v_status FROM tasks WHERE id = p_task;
        IF v_status IS NULL OR v_status IN ('done', 'failed', 'cancelled') THEN
            v_outcome := 'no_target';
            v_detail := format('task %s %s', p_task,
                               CASE WHEN v_status IS NULL THEN 'does not exist'
                                    ELSE 'is ' || v_status END);
        ELSIF p_overlap = 'skip' AND EXISTS (
                SELECT 1 FROM inbox
                 WHERE task_id = p_task AND taken_seq IS NULL
                   AND starts_with(coalesce(dedupe_key, ''), 'cron:' || p_schedule || ':')) THEN
            v_outcome := 'skipped_overlap';
            v_detail := 'the previous message is not taken yet';
        ELSE
            PERFORM noeta_deliver(p_task, p_key, p_payload);
            v_outcome := 'delivered';
        END IF;
    END IF;

    UPDATE cron_fires
       SET outcome = v_outcome, detail = coalesce(v_detail, ''),
           task_id = CASE WHEN p_kind = 'missed'
                               OR (p_kind = 'task' AND v_outcome = 'skipped_overlap')
                          THEN NULL ELSE p_task END
     WHERE schedule = p_schedule AND slot = p_slot;
    UPDATE cron_schedules SET mark = GREATEST(mark, p_slot) WHERE name = p_schedule;
    RETURN v_outcome;
END $function$;

CREATE OR REPLACE FUNCTION noeta_cron_fire(p_schedule text, p_slot timestamp with time zone, p_kind text, p_overlap text, p_detail text, p_task text, p_queue text, p_types text[], p_data text[], p_key text, p_payload text, p_concurrency_key text, p_priority integer)
 RETURNS text
 LANGUAGE plpgsql
AS $function$
DECLARE
    v_last text;
    v_status text;
    v_outcome text;
    v_detail text := p_detail;
BEGIN
    INSERT INTO cron_fires (schedule, slot, outcome) VALUES (p_schedule, p_slot, 'missed')
        ON CONFLICT (schedule, slot) DO NOTHING;
    IF NOT FOUND THEN
        RETURN 'already';
    END IF;
    INSERT INTO cron_schedules (name, mark) VALUES (p_schedule, p_slot)
        ON CONFLICT (name) DO NOTHING;
    SELECT last_task INTO v_last FROM cron_schedules WHERE name = p_schedule FOR UPDATE;

    IF p_kind = 'missed' THEN
        v_outcome := 'missed';
    ELSIF p_kind = 'task' THEN
        SELECT status INTO v_status FROM tasks WHERE id = v_last;
        IF p_overlap = 'skip' AND v_status IN ('ready', 'running', 'holding', 'waiting') THEN
            v_outcome := 'skipped_overlap';
            v_detail := format('task %s is still %s', v_last, v_status);
        ELSE
            PERFORM noeta_create_task(p_task, p_queue, NULL, p_types, p_data,
                                      p_concurrency_key, p_priority);
            v_outcome := 'created';
            UPDATE cron_schedules SET last_task = p_task WHERE name = p_schedule;
        END IF;
    ELSE
        SELECT status INTO v_status FROM tasks WHERE id = p_task;
        IF v_status IS NULL OR v_status IN ('done', 'failed', 'cancelled') THEN
            v_outcome := 'no_target';
            v_detail := format('task %s %s', p_task,
                               CASE WHEN v_status IS NULL THEN 'does not exist'
                                    ELSE 'is ' || v_status END);
        ELSIF p_overlap = 'skip' AND EXISTS (
                SELECT 1 FROM inbox
                 WHERE task_id = p_task AND taken_seq IS NULL
                   AND starts_with(coalesce(dedupe_key, ''), 'cron:' || p_schedule || ':')) THEN
            v_outcome := 'skipped_overlap';
            v_detail := 'the previous message is not taken yet';
        ELSE
            PERFORM noeta_deliver(p_task, p_key, p_payload);
            v_outcome := 'delivered';
        END IF;
    END IF;

    UPDATE cron_fires
       SET outcome = v_outcome, detail = coalesce(v_detail, ''),
           task_id = CASE WHEN p_kind = 'missed'
                               OR (p_kind = 'task' AND v_outcome = 'skipped_overlap')
                          THEN NULL ELSE p_task END
     WHERE schedule = p_schedule AND slot = p_slot;
    UPDATE cron_schedules SET mark = GREATEST(mark, p_slot) WHERE name = p_schedule;
    RETURN v_outcome;
END $function$;
