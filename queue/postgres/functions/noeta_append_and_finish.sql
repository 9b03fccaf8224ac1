CREATE OR REPLACE FUNCTION noeta_append_and_finish(p_task text, p_epoch bigint, p_expected_seq bigint, p_events jsonb, p_status text)
 RETURNS bigint
 LANGUAGE plpgsql
AS $function$
DECLARE
    v_now timestamptz := noeta_fence(p_task, p_epoch, p_expected_seq);
    v_seq bigint := p_expected_seq + jsonb_array_length(p_events);
    v_pinned boolean := false;
    v_needs text[];
BEGIN
    IF p_status NOT IN ('done', 'failed', 'cancelled') THEN
        RAISE EXCEPTION 'noeta_append_and_finish: % is not a finished status', p_status;
    END IF;
    INSERT INTO events (task_id, seq, type, data, epoch, owner)
        SELECT p_task, p_expected_seq + e.ord, e.pair->>0, e.pair->>1, p_epoch,
               (SELECT owner FROM tasks WHERE id = p_task)
          FROM jsonb_array_elements(p_events) WITH ORDINALITY AS e(pair, ord);
    -- needs (0025): the plugin names of its latest pin, sorted, each once, written by the
    -- append's own update of the row below: no trigger, no second update of the row.
    IF p_events @? '$[*] ? (@[0] == "PluginsPinned")' THEN
        v_pinned := true;
        SELECT array_agg(DISTINCT pin ->> 0 ORDER BY pin ->> 0) INTO v_needs
          FROM json_array_elements((
              SELECT (e.pair ->> 1)::json -> 'pins'
                FROM jsonb_array_elements(p_events) WITH ORDINALITY AS e(pair, ord)
               WHERE e.pair ->> 0 = 'PluginsPinned' ORDER BY e.ord DESC LIMIT 1)) AS pin;
    END IF;
    -- finished_at and the hold are set here: no trigger sets them (0024, 0040).
    UPDATE tasks SET last_seq = v_seq, status = p_status, lease_until = NULL,
           ready_at = NULL, claimable_at = NULL, updated_at = v_now, finished_at = v_now,
           needs = CASE WHEN v_pinned THEN v_needs ELSE needs END
     WHERE id = p_task;
    DELETE FROM model_limit_holds WHERE task_id = p_task;
    -- noeta_announce_finish's two statements, inline (a function run less per finish):
    -- announced only to a client awaiting it, whose mark takes this row's lock too.
    DELETE FROM finish_waiters WHERE task_id = p_task;
    IF FOUND THEN
        PERFORM pg_notify('noeta_finished', p_task);
    END IF;
    RETURN v_seq;
END $function$;
