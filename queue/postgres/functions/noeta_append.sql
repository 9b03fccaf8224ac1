CREATE OR REPLACE FUNCTION noeta_append(p_task text, p_epoch bigint, p_expected_seq bigint, p_types text[], p_data text[], p_take bigint[], p_next text, p_until timestamp with time zone, p_wake_prefix text, p_new_ids text[], p_new_queues text[], p_new_ready timestamp with time zone[], p_new_counts integer[], p_new_types text[], p_new_data text[], p_deliver_tasks text[], p_deliver_keys text[], p_deliver_payloads text[])
 RETURNS bigint
 LANGUAGE plpgsql
AS $function$
DECLARE
    v_now timestamptz;
    v_seq bigint;
    v_taken bigint;
    v_first int := 1;
    v_key text;           -- the subtasks' concurrency key and priority: the parent's
    v_priority integer;
    v_pinned boolean := false;
    v_needs text[];
    i int;
BEGIN
    v_now := noeta_fence(p_task, p_epoch, p_expected_seq);
    v_seq := p_expected_seq + coalesce(cardinality(p_types), 0);
    -- The fence holds the task row's lock: its owner is the claim's owner.
    INSERT INTO events (task_id, seq, type, data, epoch, owner)
        SELECT p_task, p_expected_seq + e.ord, e.type, e.data, p_epoch,
               (SELECT owner FROM tasks WHERE id = p_task)
          FROM unnest(p_types, p_data) WITH ORDINALITY AS e(type, data, ord);
    -- needs (0025): the plugin names of its latest pin, sorted, each once, written by the
    -- append's own update of the row below: no trigger, no second update of the row.
    IF 'PluginsPinned' = ANY (p_types) THEN
        v_pinned := true;
        SELECT array_agg(DISTINCT pin ->> 0 ORDER BY pin ->> 0) INTO v_needs
          FROM json_array_elements((
              SELECT e.data::json -> 'pins'
                FROM unnest(p_types, p_data) WITH ORDINALITY AS e(type, data, ord)
               WHERE e.type = 'PluginsPinned' ORDER BY e.ord DESC LIMIT 1)) AS pin;
    END IF;

    IF cardinality(p_take) > 0 THEN
        UPDATE inbox SET taken_seq = v_seq
         WHERE id = ANY (p_take) AND task_id = p_task AND taken_seq IS NULL;
        GET DIAGNOSTICS v_taken = ROW_COUNT;
        IF v_taken <> cardinality(p_take) THEN
            RAISE EXCEPTION USING ERRCODE = 'NT409',
                MESSAGE = 'an inbox entry to take is already taken or not this task''s';
        END IF;
    END IF;

    IF cardinality(p_new_ids) > 0 THEN
        SELECT concurrency_key, priority INTO v_key, v_priority FROM tasks WHERE id = p_task;
    END IF;
    FOR i IN 1 .. coalesce(cardinality(p_new_ids), 0) LOOP
        PERFORM noeta_create_task(p_new_ids[i], p_new_queues[i], p_new_ready[i],
                                  p_new_types[v_first:v_first + p_new_counts[i] - 1],
                                  p_new_data[v_first:v_first + p_new_counts[i] - 1],
                                  v_key, v_priority);
        v_first := v_first + p_new_counts[i];
    END LOOP;

    FOR i IN 1 .. coalesce(cardinality(p_deliver_tasks), 0) LOOP
        PERFORM noeta_deliver(p_deliver_tasks[i], p_deliver_keys[i], p_deliver_payloads[i]);
    END LOOP;

    CASE p_next
    WHEN 'continue' THEN
        -- From holding too: the wait is over, the task runs again under the same claim.
        UPDATE tasks SET last_seq = v_seq, status = 'running', updated_at = v_now,
               needs = CASE WHEN v_pinned THEN v_needs ELSE needs END
         WHERE id = p_task;
    WHEN 'wait_holding' THEN
        UPDATE tasks SET last_seq = v_seq, status = 'holding', updated_at = v_now,
               needs = CASE WHEN v_pinned THEN v_needs ELSE needs END
         WHERE id = p_task;
    WHEN 'wait' THEN
        -- A delivery that arrived while the task ran must not be slept through.
        UPDATE tasks SET last_seq = v_seq, status = 'waiting', lease_until = NULL,
               ready_at = p_until, wake_prefix = p_wake_prefix,
               claimable_at = CASE
                   WHEN EXISTS (SELECT 1 FROM inbox
                                 WHERE task_id = p_task AND taken_seq IS NULL
                                   AND (p_wake_prefix IS NULL OR
                                        starts_with(coalesce(dedupe_key, ''), p_wake_prefix)
                                        OR dedupe_key = 'cancel'))
                   THEN v_now
                   ELSE p_until END,
               updated_at = v_now,
               needs = CASE WHEN v_pinned THEN v_needs ELSE needs END
         WHERE id = p_task;
    WHEN 'done', 'failed', 'cancelled' THEN
        -- finished_at and the hold here, as every finishing writer does (0040, ADR-0143):
        -- no trigger sets them, and the table's CHECK refuses a finish without the time.
        UPDATE tasks SET last_seq = v_seq, status = p_next, lease_until = NULL,
               ready_at = NULL, claimable_at = NULL, updated_at = v_now, finished_at = v_now,
               needs = CASE WHEN v_pinned THEN v_needs ELSE needs END
         WHERE id = p_task;
        DELETE FROM model_limit_holds WHERE task_id = p_task;
    END CASE;
    RETURN v_seq;
END $function$;
