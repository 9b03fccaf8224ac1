CREATE OR REPLACE FUNCTION noeta_append_batch(p_items jsonb)
 RETURNS TABLE(item integer, appended_seq bigint, refusal_code text, refusal_message text)
 LANGUAGE plpgsql
 SET plan_cache_mode TO 'force_generic_plan'
AS $function$
DECLARE
    i record;
    t record;
    v_now timestamptz := clock_timestamp();
    v_model_limited integer[] := '{}';
    v_fleet_limited integer[] := '{}';
    v_written integer[];
    v_seqs bigint[];
    v_finished text[];
    v_told text;
BEGIN
    -- One JSON array of items (one parameter: no array of texts to escape per character
    -- in the client); an item without "status" keeps running, one without "model_keys"
    -- is no model call. Each IF below tests the parameter or a variable alone, in place:
    -- no statement is started unless an item needs it (ADR-0130).
    IF p_items @? '$[*].status ? (@ != null && !(@ == "done" || @ == "failed" || @ == "cancelled"))' THEN
        RAISE EXCEPTION 'noeta_append_batch: % is not a finished status',
            jsonb_path_query_first(p_items,
                '$[*].status ? (@ != null && !(@ == "done" || @ == "failed" || @ == "cancelled"))')
            #>> '{}';
    END IF;
    -- A model call a limit applies to is not the batch's: the caller sends it alone
    -- (noeta_append_model_called), which takes the budget. A model limit on one of its
    -- keys refuses it unread; a fleet budget on its task's queue or key refuses it once
    -- the fence has had its say, below (0032). An item that is no model call (a job's, a
    -- finish) runs neither.
    IF p_items @? '$[*].model_keys' THEN
        SELECT coalesce(array_agg(m.ord) FILTER (WHERE m.model_limited), '{}'),
               coalesce(array_agg(m.ord) FILTER (WHERE m.fleet_limited AND NOT m.model_limited), '{}')
          INTO v_model_limited, v_fleet_limited
          FROM (SELECT e.ord::integer AS ord,
                       EXISTS (SELECT 1 FROM model_limits AS l
                                WHERE l.key IN (SELECT jsonb_array_elements_text(e.item->'model_keys')))
                           AS model_limited,
                       EXISTS (SELECT 1 FROM tasks AS r JOIN fleet_budgets AS f ON f.queue = r.queue
                                WHERE r.id = e.item->>'task'
                                  AND f.concurrency_key IN ('', coalesce(r.concurrency_key, '')))
                           AS fleet_limited
                  FROM jsonb_array_elements(p_items) WITH ORDINALITY AS e(item, ord)
                 WHERE e.item->'model_keys' IS NOT NULL) AS m;
    END IF;
    -- Every item's write at once. The fence is the UPDATE's own WHERE (0041, ADR-0146): a
    -- row is written only while this claim holds it (its epoch, a live status, a lease not
    -- run out by the clock read once the row is locked, the log ending where the item
    -- says). A row whose committed version fails it is skipped without waiting for a
    -- writer in flight; the writes that could make it pass are this claim's own earlier
    -- append (a run awaits each of its writes before the next: never in flight beside
    -- this) and the renewal of a lapsed lease (the write came while it was lapsed). The
    -- events are the written rows' alone. needs (0025): the plugin names of an item's
    -- latest pin, sorted, each once. The rows are locked in task-id order, whichever side
    -- of the join the plan reads first (the items sorted, or the index's order): two
    -- batches naming the same tasks (a stale claim's and its successor's) wait for each
    -- other, never in a cycle.
    WITH u AS (
        SELECT e.ord::integer AS ord, e.item->>'task' AS task,
               (e.item->>'epoch')::bigint AS epoch,
               (e.item->>'expected_seq')::bigint AS expected_seq,
               e.item->'events' AS events, e.item->>'status' AS status
          FROM jsonb_array_elements(p_items) WITH ORDINALITY AS e(item, ord)
         WHERE e.ord <> ALL(v_model_limited) AND e.ord <> ALL(v_fleet_limited)
         ORDER BY task, e.ord
    ), w AS (
        UPDATE tasks AS held
           SET last_seq = u.expected_seq + jsonb_array_length(u.events),
               status = coalesce(u.status, 'running'),
               -- finished_at and the hold here, as noeta_append_and_finish does (0024).
               lease_until = CASE WHEN u.status IS NULL THEN held.lease_until END,
               ready_at = CASE WHEN u.status IS NULL THEN held.ready_at END,
               claimable_at = CASE WHEN u.status IS NULL THEN held.claimable_at END,
               updated_at = v_now,
               finished_at = CASE WHEN u.status IS NOT NULL THEN v_now END,
               needs = CASE WHEN u.events @? '$[*] ? (@[0] == "PluginsPinned")' THEN (
                   SELECT array_agg(DISTINCT pin ->> 0 ORDER BY pin ->> 0)
                     FROM json_array_elements((
                         SELECT (p.pair ->> 1)::json -> 'pins'
                           FROM jsonb_array_elements(u.events) WITH ORDINALITY AS p(pair, ord)
                          WHERE p.pair ->> 0 = 'PluginsPinned' ORDER BY p.ord DESC LIMIT 1)) AS pin)
                   ELSE held.needs END
          FROM u
         WHERE held.id = ANY (ARRAY(SELECT x->>'task' FROM jsonb_array_elements(p_items) AS x))
           AND held.id = u.task AND held.owner_epoch = u.epoch
           AND held.status IN ('running', 'holding') AND held.lease_until > clock_timestamp()
           AND held.last_seq = u.expected_seq
        RETURNING u.ord, u.task, u.epoch, u.expected_seq, u.events, u.status, held.owner,
                  held.last_seq
    ), logged AS (
        INSERT INTO events (task_id, seq, type, data, epoch, owner)
        SELECT w.task, w.expected_seq + e.ord, e.pair->>0, e.pair->>1, w.epoch, w.owner
          FROM w, jsonb_array_elements(w.events) WITH ORDINALITY AS e(pair, ord)
    )
    SELECT coalesce(array_agg(w.ord), '{}'), array_agg(w.last_seq),
           coalesce(array_agg(w.task) FILTER (WHERE w.status IS NOT NULL), '{}')
      INTO v_written, v_seqs, v_finished
      FROM w;
    FOR k IN 1 .. cardinality(v_written) LOOP
        item := v_written[k];
        appended_seq := v_seqs[k];
        RETURN NEXT;
    END LOOP;
    -- Refused: why, as noeta_fence says it, with its messages; told, not raised. Read in
    -- task-id order too.
    IF cardinality(v_written) < jsonb_array_length(p_items) THEN
        FOR i IN SELECT e.ord::integer AS ord, e.item->>'task' AS task,
                        (e.item->>'epoch')::bigint AS epoch,
                        (e.item->>'expected_seq')::bigint AS expected_seq
                   FROM jsonb_array_elements(p_items) WITH ORDINALITY AS e(item, ord)
                  WHERE e.ord <> ALL(v_written) ORDER BY task, e.ord LOOP
            item := i.ord;
            appended_seq := NULL;
            refusal_code := NULL;
            refusal_message := NULL;
            IF i.ord = ANY(v_model_limited) THEN
                refusal_code := 'limited';
                RETURN NEXT;
                CONTINUE;
            END IF;
            SELECT owner_epoch, status, lease_until, last_seq INTO t
              FROM tasks WHERE id = i.task FOR UPDATE;
            IF NOT FOUND THEN
                refusal_code := 'NT404';
                refusal_message := i.task;
            ELSE
                refusal_code := 'NT409';
                IF t.owner_epoch <> i.epoch THEN
                    refusal_message := format(
                        'claimed again since (epoch %s, this claim has %s)', t.owner_epoch, i.epoch);
                ELSIF t.status NOT IN ('running', 'holding') THEN
                    refusal_message := format('not held by this claim (status %s)', t.status);
                ELSIF t.lease_until <= clock_timestamp() THEN
                    refusal_message := 'the lease has expired';
                ELSIF t.last_seq <> i.expected_seq THEN
                    refusal_message := format(
                        'the log ends at seq %s, not %s', t.last_seq, i.expected_seq);
                ELSIF i.ord = ANY(v_fleet_limited) THEN
                    refusal_code := 'limited';
                ELSE
                    -- The lease had run out when the write looked; a renewal came since.
                    refusal_message := 'the lease has expired';
                END IF;
            END IF;
            RETURN NEXT;
        END LOOP;
    END IF;
    -- The finished tasks' holds dropped and their finishes announced, once a batch
    -- (0037): each statement here has a fixed price, paid per statement, not per row.
    IF cardinality(v_finished) > 0 THEN
        DELETE FROM model_limit_holds WHERE task_id = ANY(v_finished);
        -- Announced only to a client awaiting it: noeta_announce_finish's two
        -- statements, inline as in noeta_append_and_finish (0024).
        FOR v_told IN DELETE FROM finish_waiters WHERE task_id = ANY(v_finished)
                      RETURNING task_id LOOP
            PERFORM pg_notify('noeta_finished', v_told);
        END LOOP;
    END IF;
END $function$;
