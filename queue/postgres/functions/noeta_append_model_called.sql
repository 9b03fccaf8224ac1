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

CREATE OR REPLACE FUNCTION noeta_append_model_called(p_task text, p_epoch bigint, p_expected_seq bigint, p_events jsonb, p_keys text[], p_tokens bigint, p_cost numeric, OUT seq bigint, OUT retry_at timestamp with time zone, OUT limit_key text, OUT limited boolean, OUT budgeted_at timestamp with time zone, OUT budget_refused jsonb)
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
    v_budgeted boolean := false;  -- a fleet budget applies: charged with the call
    l record;
    b record;
BEGIN
    -- Fleet budgets (0032, ADR-0110): the task's queue's and its key's, locked in key
    -- order after the task row (the fence) and before the limits. One refuses a call
    -- whose estimated cost (p_cost; NULL: the model has no price, so unknown) would take
    -- its period's spend past its amount: nothing is written, the claim stays, and the
    -- caller records the refusal. Each period is a calendar hour, day or month in UTC.
    -- With none set anywhere, this costs a look at an empty table (ADR-0085).
    IF EXISTS (SELECT 1 FROM fleet_budgets) THEN
    FOR b IN SELECT f.*, date_trunc(f.period, v_now, 'UTC') AS current_start
               FROM fleet_budgets AS f JOIN tasks AS t ON t.id = p_task
              WHERE f.queue = t.queue AND f.concurrency_key IN ('', coalesce(t.concurrency_key, ''))
              ORDER BY f.queue, f.concurrency_key, f.period FOR UPDATE OF f LOOP
        v_budgeted := true;
        IF p_cost IS NULL OR (CASE WHEN b.period_start = b.current_start THEN b.spent ELSE 0 END)
               + p_cost > b.amount THEN
            budget_refused := jsonb_build_object(
                'queue', b.queue, 'key', b.concurrency_key, 'period', b.period,
                'amount', b.amount::text, 'spent', CASE WHEN p_cost IS NULL THEN NULL
                    WHEN b.period_start = b.current_start THEN b.spent::text ELSE '0' END);
            UPDATE fleet_budgets SET refusals = refusals + 1
             WHERE queue = b.queue AND concurrency_key = b.concurrency_key AND period = b.period;
            RETURN;
        END IF;
    END LOOP;
    END IF;
    -- The limits' rows are locked in key order by a loop, a cursor the executor opens,
    -- fetches and closes whatever it finds: about 0.1 ms of the append where no limit
    -- applies, before the events are written and the model is called (ADR-0135). An
    -- EXISTS first, a single statement, runs the loop only where a row would lock.
    IF EXISTS (SELECT 1 FROM model_limits m WHERE m.key = ANY (p_keys)) THEN
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
    END IF;
    IF v_limited THEN
        -- The moment the call is weighed at (0033): read once the limit rows are held, not
        -- at the fence, so a wait for another worker's append on them does not bring the
        -- next slot closer than the limit's spacing; the call is recorded at it.
        v_now := clock_timestamp();
    END IF;
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
        IF v_budgeted THEN  -- the estimate now; the caller adds the rest after the reply
            budgeted_at := v_now;
            UPDATE fleet_budgets AS f SET
                   spent = CASE WHEN f.period_start = date_trunc(f.period, v_now, 'UTC')
                                THEN f.spent ELSE 0 END + p_cost,
                   period_start = date_trunc(f.period, v_now, 'UTC'), calls = f.calls + 1
              FROM tasks AS t
             WHERE t.id = p_task AND f.queue = t.queue
               AND f.concurrency_key IN ('', coalesce(t.concurrency_key, ''));
        END IF;
        INSERT INTO events (task_id, seq, type, data, epoch, owner, created_at)
            SELECT p_task, p_expected_seq + e.ord, e.pair->>0, e.pair->>1, p_epoch,
                   (SELECT t.owner FROM tasks AS t WHERE t.id = p_task), v_now
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
