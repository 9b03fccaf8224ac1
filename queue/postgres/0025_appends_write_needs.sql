-- An agent task's first pin costs nothing beyond its append (issue 28 item 1, ADR-0092).
--
-- 0022 kept tasks.needs by a trigger on events (events_record_needs): an agent task's
-- first append, which carries its PluginsPinned, ran noeta_record_needs and updated the
-- task row a second time, right before the append's own update of that row
-- (bench/task_cost.py: task-row updates per agent task 4.00 -> 5.00). Each fenced append
-- now writes needs in the update it makes anyway: the names of the latest pin it carries,
-- sorted, each once, as the trigger wrote them; an append that pins nothing leaves them.
-- The creates wrote needs with the row already (0022). noeta_insert_events, the unfenced
-- helper no code calls, writes no task row and no needs.
DROP TRIGGER events_record_needs ON events;
DROP FUNCTION noeta_record_needs();

CREATE OR REPLACE FUNCTION noeta_append_and_continue(p_task text, p_epoch bigint, p_expected_seq bigint, p_events jsonb)
 RETURNS bigint
 LANGUAGE plpgsql
AS $function$
DECLARE
    v_now timestamptz := noeta_fence(p_task, p_epoch, p_expected_seq);
    v_seq bigint := p_expected_seq + jsonb_array_length(p_events);
    v_pinned boolean := false;
    v_needs text[];
BEGIN
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
    UPDATE tasks SET last_seq = v_seq, status = 'running', updated_at = v_now,
           needs = CASE WHEN v_pinned THEN v_needs ELSE needs END
     WHERE id = p_task;
    RETURN v_seq;
END $function$;

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
    -- finished_at and the hold are set here, not by tasks_mark_finished: a trigger run
    -- less per finish. The trigger skips an update that sets finished_at itself (0024).
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
        -- ModelCalled append is a plain continue.
        IF i.model_keys IS NOT NULL AND EXISTS (
               SELECT 1 FROM model_limits m
                WHERE m.key IN (SELECT jsonb_array_elements_text(i.model_keys))) THEN
            refusal_code := 'limited';
            RETURN NEXT;
            CONTINUE;
        END IF;
        -- The fence, as noeta_fence checks it, with its messages; told, not raised.
        SELECT owner, owner_epoch, status, lease_until, last_seq INTO t
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

CREATE OR REPLACE FUNCTION noeta_append_model_called(p_task text, p_epoch bigint, p_expected_seq bigint, p_events jsonb, p_keys text[], p_tokens bigint, OUT seq bigint, OUT retry_at timestamp with time zone, OUT limit_key text, OUT limited boolean)
 RETURNS record
 LANGUAGE plpgsql
AS $function$
DECLARE
    v_now timestamptz := noeta_fence(p_task, p_epoch, p_expected_seq);
    v_hold timestamptz;
    v_hold_key text;
    v_slot timestamptz := v_now;
    v_slot_key text;
    v_pause timestamptz;
    v_pause_key text;
    v_limited boolean := false;  -- a limit applies (else: one statement fewer)
    v_charge_at timestamptz;     -- the budget is taken at this moment, if any
    v_charge_calls integer := 0;
    v_pinned boolean := false;
    v_needs text[];
    l record;
BEGIN
    FOR l IN SELECT * FROM model_limits m WHERE m.key = ANY (p_keys) ORDER BY m.key
             FOR UPDATE LOOP
        v_limited := true;
        IF l.paused_until > v_now AND (v_pause IS NULL OR l.paused_until > v_pause) THEN
            v_pause := l.paused_until;
            v_pause_key := l.key;
        END IF;
        IF l.requests_at > v_slot THEN
            v_slot := l.requests_at;
            v_slot_key := l.key;
        END IF;
        IF l.tokens_at > v_slot THEN
            v_slot := l.tokens_at;
            v_slot_key := l.key;
        END IF;
    END LOOP;
    -- Told to the caller: where no limit applies, the reply's real tokens need no
    -- correction, and it sends none (issue 28).
    limited := v_limited;
    IF v_limited THEN  -- no limit applies, no slot is held (clearing a limit drops them)
        DELETE FROM model_limit_holds h WHERE h.task_id = p_task
            RETURNING h.until, h.limit_key INTO v_hold, v_hold_key;
    END IF;
    IF v_pause IS NOT NULL THEN
        -- Paused: a new slot after the pause, spaced like any other (a slot held before
        -- is given up), so the tasks held off do not all call at its end.
        retry_at := greatest(v_slot, v_pause);
        limit_key := v_pause_key || ' (paused after a 429)';
        v_charge_at := retry_at;
        INSERT INTO model_limit_holds VALUES (p_task, retry_at, v_pause_key);
    ELSIF v_hold > v_now THEN
        retry_at := v_hold;  -- back before its slot: it keeps waiting for it
        limit_key := v_hold_key;
        INSERT INTO model_limit_holds VALUES (p_task, v_hold, v_hold_key);
    ELSIF v_hold IS NULL AND v_slot > v_now THEN
        retry_at := v_slot;
        limit_key := v_slot_key;
        v_charge_at := v_slot;
        INSERT INTO model_limit_holds VALUES (p_task, v_slot, v_slot_key);
    ELSIF v_limited AND v_hold IS NULL THEN
        v_charge_at := v_now;  -- allowed now
        v_charge_calls := 1;
    END IF;
    IF v_charge_at IS NOT NULL THEN
        UPDATE model_limits m SET
            requests_at = CASE WHEN m.rpm IS NULL THEN NULL ELSE
                greatest(m.requests_at, v_charge_at) + interval '60 seconds' / m.rpm END,
            tokens_at = CASE WHEN m.tpm IS NULL THEN NULL ELSE
                greatest(m.tokens_at, v_charge_at) + interval '60 seconds' * p_tokens / m.tpm END,
            calls = m.calls + v_charge_calls, updated_at = clock_timestamp()
         WHERE m.key = ANY (p_keys);
    END IF;
    IF retry_at IS NULL THEN
        -- Allowed: now, or at the slot it held (charged when it was reserved).
        IF v_limited AND v_hold IS NOT NULL THEN
            UPDATE model_limits m SET calls = m.calls + 1 WHERE m.key = ANY (p_keys);
        END IF;
        INSERT INTO events (task_id, seq, type, data, epoch, owner)
            SELECT p_task, p_expected_seq + e.ord, e.pair->>0, e.pair->>1, p_epoch,
                   (SELECT t.owner FROM tasks AS t WHERE t.id = p_task)
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
        seq := p_expected_seq + jsonb_array_length(p_events);
        UPDATE tasks SET last_seq = seq, status = 'running', updated_at = v_now,
               needs = CASE WHEN v_pinned THEN v_needs ELSE needs END
         WHERE id = p_task;
        RETURN;
    END IF;
    UPDATE model_limits m SET handbacks = m.handbacks + 1,
           waited_seconds = m.waited_seconds + extract(epoch FROM retry_at - v_now)
     WHERE m.key = split_part(limit_key, ' ', 1);
    UPDATE tasks SET status = 'ready', lease_until = NULL, ready_at = retry_at,
           claimable_at = retry_at, updated_at = v_now
     WHERE id = p_task;
END $function$;

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
        UPDATE tasks SET last_seq = v_seq, status = p_next, lease_until = NULL,
               ready_at = NULL, claimable_at = NULL, updated_at = v_now,
               needs = CASE WHEN v_pinned THEN v_needs ELSE needs END
         WHERE id = p_task;
    END CASE;
    RETURN v_seq;
END $function$;
