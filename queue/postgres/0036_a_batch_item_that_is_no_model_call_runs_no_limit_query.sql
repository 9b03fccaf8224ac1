-- A batch's item that is no model call runs no limit query (issue 28, ADR-0130).
--
-- noeta_append_batch tested `i.model_keys IS NOT NULL AND EXISTS (...)` for the model
-- limits and again for the fleet budgets. PL/pgSQL evaluates a condition holding a
-- subquery as a statement through SPI (a plan fetched from the cache, the executor
-- started, run and ended), and does so whatever its first operand says: two statements
-- an item, for every job's finish that has no model keys at all. Split into two IFs,
-- the first test is a simple expression evaluated in place and the query runs only for
-- a model call. The checks, their order and the refusals are unchanged. Measured on a
-- scratch schema of 350,000 tasks, finishing batches of 4 (docs/scaling.md): the
-- backend's CPU a finished job about 240 -> 205 us.

CREATE OR REPLACE FUNCTION noeta_append_batch(p_items jsonb)
 RETURNS TABLE(item integer, appended_seq bigint, refusal_code text, refusal_message text)
 LANGUAGE plpgsql
AS $function$
DECLARE
    i record;
    t record;
    v_now timestamptz;
    v_pinned boolean;
    v_needs text[];
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
        -- The fence, as noeta_fence checks it, with its messages; told, not raised.
        SELECT owner, owner_epoch, status, lease_until, last_seq, queue, concurrency_key INTO t
          FROM tasks WHERE id = i.task FOR UPDATE;
        IF NOT FOUND THEN
            refusal_code := 'NT404';
            refusal_message := i.task;
            RETURN NEXT;
            CONTINUE;
        END IF;
        v_now := clock_timestamp();
        IF t.owner_epoch <> i.epoch THEN
            refusal_code := 'NT409';
            refusal_message := format(
                'claimed again since (epoch %s, this claim has %s)', t.owner_epoch, i.epoch);
        ELSIF t.status NOT IN ('running', 'holding') THEN
            refusal_code := 'NT409';
            refusal_message := format('not held by this claim (status %s)', t.status);
        ELSIF t.lease_until <= v_now THEN
            refusal_code := 'NT409';
            refusal_message := 'the lease has expired';
        ELSIF t.last_seq <> i.expected_seq THEN
            refusal_code := 'NT409';
            refusal_message := format(
                'the log ends at seq %s, not %s', t.last_seq, i.expected_seq);
        END IF;
        IF refusal_code IS NULL AND i.model_keys IS NOT NULL THEN
            IF EXISTS (SELECT 1 FROM fleet_budgets AS f
                        WHERE f.queue = t.queue
                          AND f.concurrency_key IN ('', coalesce(t.concurrency_key, ''))) THEN
                refusal_code := 'limited';
            END IF;
        END IF;
        IF refusal_code IS NOT NULL THEN
            RETURN NEXT;
            CONTINUE;
        END IF;
        appended_seq := i.expected_seq + jsonb_array_length(i.events);
        INSERT INTO events (task_id, seq, type, data, epoch, owner)
            SELECT i.task, i.expected_seq + e.ord, e.pair->>0, e.pair->>1, i.epoch, t.owner
              FROM jsonb_array_elements(i.events) WITH ORDINALITY AS e(pair, ord);
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
        IF i.status IS NULL THEN
            UPDATE tasks SET last_seq = appended_seq, status = 'running', updated_at = v_now,
                   needs = CASE WHEN v_pinned THEN v_needs ELSE needs END
             WHERE id = i.task;
        ELSE
            -- finished_at and the hold here, as noeta_append_and_finish does (0024).
            UPDATE tasks SET last_seq = appended_seq, status = i.status, lease_until = NULL,
                   ready_at = NULL, claimable_at = NULL, updated_at = v_now,
                   finished_at = v_now, needs = CASE WHEN v_pinned THEN v_needs ELSE needs END
             WHERE id = i.task;
            DELETE FROM model_limit_holds WHERE task_id = i.task;
            -- Announced only to a client awaiting it: noeta_announce_finish's two
            -- statements, inline as in noeta_append_and_finish (0024).
            DELETE FROM finish_waiters WHERE task_id = i.task;
            IF FOUND THEN
                PERFORM pg_notify('noeta_finished', i.task);
            END IF;
        END IF;
        RETURN NEXT;
    END LOOP;
END $function$;
