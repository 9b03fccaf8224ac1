CREATE OR REPLACE FUNCTION noeta_append_batch(p_items jsonb)
 RETURNS TABLE(item integer, appended_seq bigint, refusal_code text, refusal_message text)
 LANGUAGE plpgsql
AS $function$
DECLARE
    i record;
    t record;
    v_now timestamptz;
    v_owner text;
    v_limited boolean;
    v_pinned boolean;
    v_needs text[];
    v_finished text[] := '{}';
    v_told text;
BEGIN
    -- The rows are locked in task-id order: two batches naming the same tasks (a stale
    -- claim's and its successor's) wait for each other, never in a cycle.
    -- One JSON array of items (one parameter: no array of texts to escape per character
    -- in the client); an item without "status" keeps running, one without "model_keys"
    -- is no model call.
    FOR i IN SELECT u.ord::integer AS ord, u.item->>'task' AS task,
                    (u.item->>'epoch')::bigint AS epoch,
                    (u.item->>'expected_seq')::bigint AS expected_seq,
                    u.item->'events' AS events, u.item->>'status' AS status,
                    u.item->'model_keys' AS model_keys
               FROM jsonb_array_elements(p_items) WITH ORDINALITY AS u(item, ord)
              ORDER BY task, u.ord LOOP
        item := i.ord;
        appended_seq := NULL;
        refusal_code := NULL;
        refusal_message := NULL;
        IF i.status IS NOT NULL AND i.status NOT IN ('done', 'failed', 'cancelled') THEN
            RAISE EXCEPTION 'noeta_append_batch: % is not a finished status', i.status;
        END IF;
        -- A model call a limit applies to is not the batch's: the caller sends it alone
        -- (noeta_append_model_called), which takes the budget. Where none applies, the
        -- ModelCalled append is a plain continue. So for a fleet budget on its queue or
        -- its key, looked for below once the row is read (0032). Each test in two IFs
        -- (0036): a condition with a subquery is a statement the executor starts and
        -- ends, whatever its first operand says, while `IS NOT NULL` alone is evaluated
        -- in place; an item that is no model call (a job's, a finish) runs neither.
        IF i.model_keys IS NOT NULL THEN
            IF EXISTS (SELECT 1 FROM model_limits m
                        WHERE m.key IN (SELECT jsonb_array_elements_text(i.model_keys))) THEN
                refusal_code := 'limited';
                RETURN NEXT;
                CONTINUE;
            END IF;
        END IF;
        appended_seq := i.expected_seq + jsonb_array_length(i.events);
        v_pinned := false;
        -- needs (0025): the plugin names of its latest pin, sorted, each once, written by the
        -- append's own update of the row below: no trigger, no second update of the row.
        IF i.events @? '$[*] ? (@[0] == "PluginsPinned")' THEN
            v_pinned := true;
            SELECT array_agg(DISTINCT pin ->> 0 ORDER BY pin ->> 0) INTO v_needs
              FROM json_array_elements((
                  SELECT (e.pair ->> 1)::json -> 'pins'
                    FROM jsonb_array_elements(i.events) WITH ORDINALITY AS e(pair, ord)
                   WHERE e.pair ->> 0 = 'PluginsPinned' ORDER BY e.ord DESC LIMIT 1)) AS pin;
        END IF;
        -- A model call's row is read first, for the fleet budgets of its queue or its key
        -- (0032); the write below is then refused, and told why as the fence tells it.
        v_limited := false;
        IF i.model_keys IS NOT NULL THEN
            SELECT queue, concurrency_key INTO t FROM tasks WHERE id = i.task FOR UPDATE;
            IF FOUND THEN
                IF EXISTS (SELECT 1 FROM fleet_budgets AS f
                            WHERE f.queue = t.queue
                              AND f.concurrency_key IN ('', coalesce(t.concurrency_key, ''))) THEN
                    v_limited := true;
                END IF;
            END IF;
        END IF;
        -- The fence is the write's own WHERE (0041, ADR-0146): the row is updated only
        -- while this claim holds it (its epoch, a live status, a lease not run out by the
        -- clock read once the row is locked, the log ending where the item says): one
        -- statement where the fence's SELECT ... FOR UPDATE and the UPDATE were two. A row
        -- whose committed version fails it is skipped without waiting for a writer in
        -- flight; the writes that could make it pass are this claim's own earlier append
        -- (a run awaits each of its writes before the next: never in flight beside this)
        -- and the renewal of a lapsed lease (the write came while it was lapsed). A row
        -- that fails is read below, locked, only to tell why.
        v_owner := NULL;
        IF v_limited THEN
            NULL;  -- refused below, once the fence's checks have had their say
        ELSIF i.status IS NULL THEN
            UPDATE tasks SET last_seq = appended_seq, status = 'running',
                   updated_at = clock_timestamp(),
                   needs = CASE WHEN v_pinned THEN v_needs ELSE needs END
             WHERE id = i.task AND owner_epoch = i.epoch AND status IN ('running', 'holding')
               AND lease_until > clock_timestamp() AND last_seq = i.expected_seq
            RETURNING owner INTO v_owner;
        ELSE
            -- finished_at and the hold here, as noeta_append_and_finish does (0024).
            v_now := clock_timestamp();
            UPDATE tasks SET last_seq = appended_seq, status = i.status, lease_until = NULL,
                   ready_at = NULL, claimable_at = NULL, updated_at = v_now,
                   finished_at = v_now, needs = CASE WHEN v_pinned THEN v_needs ELSE needs END
             WHERE id = i.task AND owner_epoch = i.epoch AND status IN ('running', 'holding')
               AND lease_until > clock_timestamp() AND last_seq = i.expected_seq
            RETURNING owner INTO v_owner;
        END IF;
        IF v_owner IS NULL THEN
            -- Refused: why, as noeta_fence says it, with its messages; told, not raised.
            SELECT owner_epoch, status, lease_until, last_seq INTO t
              FROM tasks WHERE id = i.task FOR UPDATE;
            appended_seq := NULL;
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
                ELSIF v_limited THEN
                    refusal_code := 'limited';
                ELSE
                    -- The lease had run out when the write looked; a renewal came since.
                    refusal_message := 'the lease has expired';
                END IF;
            END IF;
            RETURN NEXT;
            CONTINUE;
        END IF;
        INSERT INTO events (task_id, seq, type, data, epoch, owner)
            SELECT i.task, i.expected_seq + e.ord, e.pair->>0, e.pair->>1, i.epoch, v_owner
              FROM jsonb_array_elements(i.events) WITH ORDINALITY AS e(pair, ord);
        IF i.status IS NOT NULL THEN
            v_finished := v_finished || i.task;
        END IF;
        RETURN NEXT;
    END LOOP;
    -- The finished tasks' holds dropped and their finishes announced, once a batch
    -- (0037): each statement here has a fixed price, paid per statement, not per row.
    -- Their rows are locked, by the loop; nothing else waits on these.
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
