-- Shared model-call limits (ADR-0075): requests and tokens per minute per `provider/model`
-- or `provider/*`, counted by every worker in these rows, taken by the append that records
-- ModelCalled (so a call is counted exactly when it is recorded).

-- One row per limit. The budget is a GCRA (a token bucket with no burst, kept as one
-- time): `requests_at` is when the next call may go, and each call moves it on by
-- 60/rpm seconds; `tokens_at` likewise by tokens * 60/tpm. Calls are spread evenly over
-- the minute: rpm 600 lets one call through every 100 ms, never 600 at once.
CREATE TABLE model_limits (
    key            text PRIMARY KEY,
    rpm            integer CHECK (rpm > 0),
    tpm            integer CHECK (tpm > 0),
    requests_at    timestamptz,
    tokens_at      timestamptz,
    -- A 429 with Retry-After seen by any worker: no call under this limit until then.
    paused_until   timestamptz,
    calls          bigint NOT NULL DEFAULT 0,
    handbacks      bigint NOT NULL DEFAULT 0,
    waited_seconds double precision NOT NULL DEFAULT 0,
    throttled      bigint NOT NULL DEFAULT 0,
    updated_at     timestamptz NOT NULL DEFAULT clock_timestamp(),
    CONSTRAINT model_limits_limit_something CHECK (rpm IS NOT NULL OR tpm IS NOT NULL)
);

-- A task handed back for a limit keeps the slot it was given: its next attempt takes it
-- without a new check, so tasks waiting for the same budget do not all wake at once to
-- race for one slot. The slot was charged when it was reserved.
CREATE TABLE model_limit_holds (
    task_id   text PRIMARY KEY,
    until     timestamptz NOT NULL,
    limit_key text NOT NULL
);

-- A limit's budget taken at p_at: each limit moves on by one call and p_tokens.
CREATE FUNCTION noeta_take_model_budget(p_keys text[], p_tokens bigint, p_at timestamptz,
                                        p_calls int)
RETURNS void LANGUAGE sql AS $$
    UPDATE model_limits SET
        requests_at = CASE WHEN rpm IS NULL THEN NULL ELSE
            greatest(requests_at, p_at) + interval '60 seconds' / rpm END,
        tokens_at = CASE WHEN tpm IS NULL THEN NULL ELSE
            greatest(tokens_at, p_at) + interval '60 seconds' * p_tokens / tpm END,
        calls = calls + p_calls, updated_at = clock_timestamp()
     WHERE key = ANY (p_keys);
$$;

-- The ModelCalled append with the budget: fenced like every append, then the limits of
-- p_keys are locked (in key order) and checked on the database clock. Allowed: the events
-- land as in noeta_append_and_continue and the budget is taken; (seq, NULL, NULL) is
-- returned. Refused: nothing is appended, the task is ready again at the moment the
-- budget allows, that slot is reserved for it (a held slot is taken without a new check),
-- and (NULL, that moment, the limit that decided) is returned. A paused limit (a 429's
-- Retry-After) refuses until the pause ends, giving a slot after it.
CREATE FUNCTION noeta_append_model_called(
    p_task text, p_epoch bigint, p_expected_seq bigint, p_events jsonb,
    p_keys text[], p_tokens bigint,
    OUT seq bigint, OUT retry_at timestamptz, OUT limit_key text)
LANGUAGE plpgsql AS $$
DECLARE
    v_now timestamptz := noeta_fence(p_task, p_epoch, p_expected_seq);
    v_hold timestamptz;
    v_hold_key text;
    v_slot timestamptz := v_now;
    v_slot_key text;
    v_pause timestamptz;
    v_pause_key text;
    v_limited boolean := false;  -- a limit applies (else: one statement fewer)
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
    IF v_limited THEN  -- no limit applies, no slot is held (clearing a limit drops them)
        DELETE FROM model_limit_holds h WHERE h.task_id = p_task
            RETURNING h.until, h.limit_key INTO v_hold, v_hold_key;
    END IF;
    IF v_pause IS NOT NULL THEN
        -- Paused: a new slot after the pause, spaced like any other (a slot held before
        -- is given up), so the tasks held off do not all call at its end.
        retry_at := greatest(v_slot, v_pause);
        limit_key := v_pause_key || ' (paused after a 429)';
        PERFORM noeta_take_model_budget(p_keys, p_tokens, retry_at, 0);
        INSERT INTO model_limit_holds VALUES (p_task, retry_at, v_pause_key);
    ELSIF v_hold > v_now THEN
        retry_at := v_hold;  -- back before its slot: it keeps waiting for it
        limit_key := v_hold_key;
        INSERT INTO model_limit_holds VALUES (p_task, v_hold, v_hold_key);
    ELSIF v_hold IS NULL AND v_slot > v_now THEN
        retry_at := v_slot;
        limit_key := v_slot_key;
        PERFORM noeta_take_model_budget(p_keys, p_tokens, v_slot, 0);
        INSERT INTO model_limit_holds VALUES (p_task, v_slot, v_slot_key);
    ELSE
        -- Allowed: now, or at the slot it held (charged when it was reserved).
        IF v_limited AND v_hold IS NULL THEN
            PERFORM noeta_take_model_budget(p_keys, p_tokens, v_now, 1);
        ELSIF v_limited THEN
            UPDATE model_limits m SET calls = m.calls + 1 WHERE m.key = ANY (p_keys);
        END IF;
        seq := noeta_insert_events(p_task, p_epoch, p_expected_seq, p_events);
        UPDATE tasks SET last_seq = seq, status = 'running', updated_at = v_now
         WHERE id = p_task;
        RETURN;
    END IF;
    UPDATE model_limits m SET handbacks = m.handbacks + 1,
           waited_seconds = m.waited_seconds + extract(epoch FROM retry_at - v_now)
     WHERE m.key = split_part(limit_key, ' ', 1);
    UPDATE tasks SET status = 'ready', lease_until = NULL, ready_at = retry_at,
           claimable_at = retry_at, updated_at = v_now
     WHERE id = p_task;
END $$;

-- The reply's real tokens (p_delta: real minus the estimate taken) moved onto the limits.
CREATE FUNCTION noeta_model_tokens_used(p_keys text[], p_delta bigint)
RETURNS void LANGUAGE sql AS $$
    UPDATE model_limits SET tokens_at = tokens_at + interval '60 seconds' * p_delta / tpm,
           updated_at = clock_timestamp()
     WHERE key = ANY (p_keys) AND tpm IS NOT NULL AND tokens_at IS NOT NULL;
$$;

-- A 429: counted; with a Retry-After, every worker holds off these limits until then.
CREATE FUNCTION noeta_model_throttled(p_keys text[], p_seconds double precision)
RETURNS void LANGUAGE sql AS $$
    UPDATE model_limits SET throttled = throttled + 1,
           paused_until = CASE WHEN p_seconds IS NULL THEN paused_until ELSE
               greatest(paused_until, clock_timestamp() + p_seconds * interval '1 second') END,
           updated_at = clock_timestamp()
     WHERE key = ANY (p_keys);
$$;
